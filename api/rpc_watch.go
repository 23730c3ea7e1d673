package api

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// maxSubscriptionLen bounds a client's subscription name.
const maxSubscriptionLen = 128

type rpcWatchParams struct {
	Subscription string `json:"subscription"`
	Session      string `json:"session"`
	FromCursor   int64  `json:"from_cursor"`
}

type rpcWatchResult struct {
	Subscription string `json:"subscription"`
	Running      bool   `json:"running"`
}

// streamClosed is the stream.closed notification.
type streamClosed struct {
	Subscription string `json:"subscription"`
	Reason       string `json:"reason"`
}

// watch answers planner.watch: the session's stored outputs after
// from_cursor, then the live ones, as planner.output notifications.
func (c *rpcConn) watch(ctx context.Context, req rpcRequest) (any, error) {
	var p rpcWatchParams
	if err := decodeParams(req.Params, &p); err != nil {
		return nil, err
	}
	if err := checkSubscription(p.Subscription); err != nil {
		return nil, err
	}
	if p.Session == "" {
		return nil, store.Errorf(store.CodeInvalid, "params: field session: required")
	}
	principal, err := c.recheck(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.reserve(p.Subscription); err != nil { // while the watch starts
		return nil, err
	}
	w, err := c.srv.hub.Watch(ctx, store.HumanCaller(principal), p.Session, p.FromCursor)
	c.mu.Lock()
	if err != nil || c.isClosed() {
		delete(c.watches, p.Subscription)
		c.mu.Unlock()
		if err == nil {
			w.Close()
			return nil, store.Errorf(store.CodeUnavailable, "the connection is closing")
		}
		return nil, err
	}
	c.watches[p.Subscription] = w
	c.mu.Unlock()
	// The reply goes out before the first output: forwarding starts after it.
	return rpcWatchReply{rpcWatchResult: rpcWatchResult{Subscription: p.Subscription, Running: w.Session().Running},
		start: func() {
			c.calls.Add(1)
			go func() {
				defer c.calls.Done()
				rc := c.srv.sessionRecheck(c.socketPrincipal, c.subject(), p.Session)
				defer rc.release()
				c.forward(p.Subscription, w, rc)
			}()
		}}, nil
}

// rpcWatchReply is the watch result with what to do once it is queued.
type rpcWatchReply struct {
	rpcWatchResult
	start func()
}

func (r rpcWatchReply) afterReply() { r.start() }

// forward sends a watch's outputs until it ends, then stream.closed when
// it ended for a reason other than the connection closing; every
// server.stream_recheck it checks rc, and ends when that fails.
func (c *rpcConn) forward(sub string, w *tasks.Watch, rc recheck) {
	defer func() {
		c.mu.Lock()
		if c.watches[sub] == w {
			delete(c.watches, sub)
		}
		c.mu.Unlock()
	}()
	tick := time.NewTicker(c.srv.rpcCfg.recheck)
	defer tick.Stop()
	ended := func() bool {
		reason := rc.verdict(c.ctx)
		if reason == "" {
			return false
		}
		w.Close()
		if c.ctx.Err() == nil {
			c.notify("stream.closed", streamClosed{Subscription: sub, Reason: reason})
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
		case o, ok := <-w.Outputs():
			if !ok {
				c.watchEnded(sub, w)
				return
			}
			c.notifyOutput(sub, o)
		case <-c.ctx.Done():
			w.Close()
			return
		}
	}
}

func (c *rpcConn) watchEnded(sub string, w *tasks.Watch) {
	<-w.Done()
	reason := "closed"
	switch err := w.Err(); {
	case errors.Is(err, tasks.ErrLagging):
		reason = "lagging"
	case errors.Is(err, tasks.ErrHubStopped):
		reason = "shutdown"
	case err != nil:
		reason = "error"
		c.srv.log.Warn("rpc watch ended", slog.String("subscription", sub), slog.Any("error", err))
	}
	if c.ctx.Err() == nil {
		c.notify("stream.closed", streamClosed{Subscription: sub, Reason: reason})
	}
}

// outputParams is a stored or live output with its subscription.
func outputParams(sub string, o store.Output) map[string]any {
	b, _ := stdjson.Marshal(o)
	var m map[string]any
	dec := stdjson.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	_ = dec.Decode(&m)
	if m == nil {
		m = map[string]any{}
	}
	m["subscription"] = sub
	return m
}

// checkSubscription refuses a missing or too long subscription name.
func checkSubscription(name string) error {
	switch {
	case name == "":
		return store.Errorf(store.CodeInvalid, "params: field subscription: required")
	case len(name) > maxSubscriptionLen:
		return store.Errorf(store.CodeInvalid, "params: field subscription: at most %d bytes", maxSubscriptionLen)
	}
	return nil
}

// reserve takes a subscription name of the socket, shared by watches and
// streams; a name in use is a conflict.
func (c *rpcConn) reserve(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, taken := c.watches[name]; taken {
		return store.Errorf(store.CodeConflict, "subscription %q is already in use on this connection", name)
	}
	c.watches[name] = nil
	return nil
}
