package api

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Methods of /rpc's event streams (SPEC §8).
const (
	methodSubscribe   = "stream.subscribe"
	methodUnsubscribe = "stream.unsubscribe"
)

type rpcSubscribeParams struct {
	Subscription string `json:"subscription"`
	Stream       string `json:"stream"`
	FromSeq      *int64 `json:"from_seq"`
}

type rpcSubscribeResult struct {
	Subscription string `json:"subscription"`
	Seq          int64  `json:"seq"`
}

type rpcUnsubscribeParams struct {
	Subscription string `json:"subscription"`
}

// streamEvent is the stream.event notification.
type streamEvent struct {
	Subscription string `json:"subscription"`
	store.Event
}

// rpcStream is one stream subscription of a connection and its forwarder.
type rpcStream struct {
	sub    *tasks.EventSub
	quit   chan struct{} // closed by stream.unsubscribe
	exited chan struct{} // closed when the forwarder has sent its last frame
	once   sync.Once
}

// rpcStreams holds the stream subscriptions of every connection of the
// process by connection and name. Their names share each connection's
// namespace with planner.watch: a stream subscription holds its name in the
// connection's watches as a reservation (nil) for as long as it runs.
type rpcStreams struct {
	mu     sync.Mutex
	byConn map[*rpcConn]map[string]*rpcStream
}

func (r *rpcStreams) put(c *rpcConn, name string, st *rpcStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byConn == nil {
		r.byConn = map[*rpcConn]map[string]*rpcStream{}
	}
	if r.byConn[c] == nil {
		r.byConn[c] = map[string]*rpcStream{}
	}
	r.byConn[c][name] = st
}

func (r *rpcStreams) get(c *rpcConn, name string) *rpcStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byConn[c][name]
}

func (r *rpcStreams) remove(c *rpcConn, name string, st *rpcStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byConn[c][name] == st {
		delete(r.byConn[c], name)
		if len(r.byConn[c]) == 0 {
			delete(r.byConn, c)
		}
	}
}

// streamCall answers stream.subscribe and stream.unsubscribe.
func (c *rpcConn) streamCall(ctx context.Context, req rpcRequest) (any, error) {
	if req.Method == methodUnsubscribe {
		return c.unsubscribe(req)
	}
	var p rpcSubscribeParams
	if err := decodeParams(req.Params, &p); err != nil {
		return nil, err
	}
	if err := checkSubscription(p.Subscription); err != nil {
		return nil, err
	}
	if p.Stream == "" {
		return nil, store.Errorf(store.CodeInvalid, "params: field stream: required (project:<KEY> or item:<KEY>)")
	}
	principal, err := c.recheck(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.reserve(p.Subscription); err != nil { // held for the stream's life
		return nil, err
	}
	release := func() {
		c.mu.Lock()
		if w, ok := c.watches[p.Subscription]; ok && w == nil {
			delete(c.watches, p.Subscription)
		}
		c.mu.Unlock()
	}
	sub, err := c.srv.events.Subscribe(ctx, store.HumanCaller(principal), p.Stream, p.FromSeq)
	if err != nil {
		release()
		return nil, err
	}
	if c.isClosed() || c.ctx.Err() != nil {
		sub.Close()
		release()
		return nil, store.Errorf(store.CodeUnavailable, "the connection is closing")
	}
	st := &rpcStream{sub: sub, quit: make(chan struct{}), exited: make(chan struct{})}
	c.srv.streams.put(c, p.Subscription, st)
	// The reply goes out before the first event: forwarding starts after it.
	return rpcStreamReply{rpcSubscribeResult: rpcSubscribeResult{Subscription: p.Subscription, Seq: sub.Seq()},
		start: func() {
			c.calls.Add(1)
			go func() {
				defer c.calls.Done()
				defer release()
				defer c.srv.streams.remove(c, p.Subscription, st)
				rc := c.srv.streamRecheck(c.socketPrincipal, c.subject(), p.Stream)
				defer rc.release()
				c.forwardEvents(p.Subscription, st, rc)
			}()
		}}, nil
}

// rpcStreamReply is the subscribe result with what to do once it is queued.
type rpcStreamReply struct {
	rpcSubscribeResult
	start func()
}

func (r rpcStreamReply) afterReply() { r.start() }

// unsubscribe ends a stream subscription, or a planner.watch of the same
// namespace, and answers once no more of its frames will be sent.
func (c *rpcConn) unsubscribe(req rpcRequest) (any, error) {
	var p rpcUnsubscribeParams
	if err := decodeParams(req.Params, &p); err != nil {
		return nil, err
	}
	if p.Subscription == "" {
		return nil, store.Errorf(store.CodeInvalid, "params: field subscription: required")
	}
	if st := c.srv.streams.get(c, p.Subscription); st != nil {
		st.once.Do(func() { close(st.quit) })
		st.sub.Close()
		<-st.exited
		return struct{}{}, nil
	}
	c.mu.Lock()
	w := c.watches[p.Subscription]
	c.mu.Unlock()
	if w == nil {
		return nil, store.Errorf(store.CodeNotFound, "subscription %q not found on this connection", p.Subscription)
	}
	w.Close()
	return struct{}{}, nil
}

// forwardEvents sends a subscription's events as stream.event until it
// ends, then stream.closed when it ended for a reason other than the
// client's unsubscribe or the connection closing; every
// server.stream_recheck it checks rc, and ends when that fails.
func (c *rpcConn) forwardEvents(name string, st *rpcStream, rc recheck) {
	defer close(st.exited)
	tick := time.NewTicker(c.srv.rpcCfg.recheck)
	defer tick.Stop()
	ended := func() bool {
		reason := rc.verdict(c.ctx)
		if reason == "" {
			return false
		}
		st.sub.Close()
		select {
		case <-st.quit: // unsubscribed meanwhile: it says nothing more
		default:
			if c.ctx.Err() == nil {
				c.notify("stream.closed", streamClosed{Subscription: name, Reason: reason})
			}
		}
		return true
	}
	for {
		select {
		case <-tick.C:
			if ended() {
				return
			}
		case <-rc.wake:
			if ended() {
				return
			}
		case <-st.quit:
			return
		case <-c.ctx.Done():
			st.sub.Close()
			return
		case e, ok := <-st.sub.Events():
			if !ok {
				c.streamEnded(name, st.sub)
				return
			}
			select {
			case <-st.quit:
				return
			default:
			}
			c.notify("stream.event", streamEvent{Subscription: name, Event: e})
		}
	}
}

func (c *rpcConn) streamEnded(name string, sub *tasks.EventSub) {
	reason := "closed"
	switch err := sub.Err(); {
	case errors.Is(err, tasks.ErrLagging):
		reason = "lagging"
	case errors.Is(err, tasks.ErrHubStopped):
		reason = "shutdown"
	case err != nil:
		reason = "error"
		c.srv.log.Warn("rpc stream ended", slog.String("subscription", name), slog.Any("error", err))
	}
	if c.ctx.Err() == nil {
		c.notify("stream.closed", streamClosed{Subscription: name, Reason: reason})
	}
}
