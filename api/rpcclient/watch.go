package rpcclient

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// resumeTimeout bounds one re-watch.
const resumeTimeout = 30 * time.Second

// Watch is one session followed across reconnects: each (re)connection
// watches it again from the last cursor received, under a new
// subscription name, and the running round's text the server sends again
// is trimmed of what was delivered already.
type Watch struct {
	c       *Client
	session string
	queue   chan Output // from the reader to the pump
	out     chan Output
	stop    chan struct{} // Close
	ending  chan struct{} // the watch ended: deliver what is queued, then close out
	stopped sync.Once
	endOnce sync.Once
	err     error
	last    atomic.Int64 // the last cursor delivered

	// Guarded by c.mu.
	sub     string // the subscription on cn, "" while none
	cn      *conn
	ended   bool
	running bool
	cursor  int64 // the last cursor received
	// The running round as delivered: its turn and the bytes of its text.
	round      string
	roundBytes int
	// After a resume: the bytes of the round's text to trim from what the
	// server sends again.
	skipTurn string
	skip     int
}

// Watch follows the session's outputs after fromCursor (0: all of them),
// then the live ones.
func (c *Client) Watch(ctx context.Context, session string, fromCursor int64) (*Watch, error) {
	w := &Watch{c: c, session: session, queue: make(chan Output, c.opts.Notifications), out: make(chan Output),
		stop: make(chan struct{}), ending: make(chan struct{}), cursor: fromCursor}
	w.last.Store(fromCursor)
	c.mu.Lock()
	cn := c.cur
	if cn != nil {
		c.open[w] = struct{}{}
	}
	c.mu.Unlock()
	if cn == nil {
		return nil, c.downErr("planner.watch")
	}
	go w.pump()
	if err := c.attach(ctx, w, cn); err != nil {
		c.endWatch(w, err)
		return nil, err
	}
	return w, nil
}

// attach watches w on cn from its last cursor under a new subscription.
func (c *Client) attach(ctx context.Context, w *Watch, cn *conn) error {
	sub := fmt.Sprintf("w%d", c.subN.Add(1))
	c.mu.Lock()
	if w.ended {
		c.mu.Unlock()
		return nil
	}
	if w.sub != "" {
		delete(c.watches, w.sub)
	}
	c.watches[sub] = w
	w.sub, w.cn = sub, cn
	w.skipTurn, w.skip = w.round, w.roundBytes
	from := w.cursor
	c.mu.Unlock()
	var res struct {
		Running bool `json:"running"`
	}
	err := cn.call(ctx, "planner.watch", map[string]any{"subscription": sub, "session": w.session, "from_cursor": from}, &res)
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.sub != sub {
		return nil // attached again since
	}
	if err == nil {
		w.running = res.Running
		return nil
	}
	delete(c.watches, sub)
	w.sub = ""
	return err
}

// resume attaches w on cn again; a refusal ends it, a lost connection
// leaves it to the next one.
func (c *Client) resume(w *Watch, cn *conn) {
	ctx, cancel := context.WithTimeout(context.Background(), resumeTimeout)
	defer cancel()
	go func() {
		select {
		case <-w.stop:
		case <-cn.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	err := c.attach(ctx, w, cn)
	if err == nil || cn.isDone() {
		return
	}
	c.endWatch(w, fmt.Errorf("rpcclient: watch %s again: %w", w.session, err))
}

func (cn *conn) isDone() bool {
	select {
	case <-cn.done:
		return true
	default:
		return false
	}
}

// route hands planner.output and stream.closed of a Watch's subscription
// to it; false leaves the notification to Client.Notifications.
func (c *Client) route(cn *conn, method string, params []byte) bool {
	if method != "planner.output" && method != "stream.closed" {
		return false
	}
	var o Output
	var closed struct {
		Subscription string `json:"subscription"`
		Reason       string `json:"reason"`
	}
	var sub string
	if method == "planner.output" {
		if c.Decode(params, &o) != nil {
			return false
		}
		sub = o.Subscription
	} else {
		if c.Decode(params, &closed) != nil {
			return false
		}
		sub = closed.Subscription
	}
	c.mu.Lock()
	w := c.watches[sub]
	if w == nil {
		retired := c.retired[sub]
		c.mu.Unlock()
		return retired
	}
	if method == "stream.closed" {
		delete(c.watches, sub)
		w.sub = ""
		c.mu.Unlock()
		switch closed.Reason {
		case "lagging", "shutdown":
			go c.resume(w, cn)
		default:
			c.endWatch(w, fmt.Errorf("rpcclient: watch %s: stream closed: %s", w.session, closed.Reason))
		}
		return true
	}
	keep := w.follow(&o)
	c.mu.Unlock()
	if keep {
		select {
		case w.queue <- o:
		case <-w.stop:
		case <-w.ending:
		case <-c.closing:
		}
	}
	return true
}

// follow updates the watch's place with o (under c.mu) and trims o's text
// of what was delivered before a resume; false drops o.
func (w *Watch) follow(o *Output) bool {
	if w.ended {
		return false
	}
	if o.Cursor > 0 {
		if o.Cursor <= w.cursor {
			return false // delivered already
		}
		w.cursor = o.Cursor
		if o.Turn == w.skipTurn {
			w.skip = 0 // the round ended: the server's next text is new
		}
		switch {
		case o.Type == "done":
			if w.round == o.Turn {
				w.round, w.roundBytes = "", 0
			}
		case o.Type == "started", w.round == o.Turn, w.round == "" && o.Type != "queued":
			w.round, w.roundBytes = o.Turn, 0
		}
		return true
	}
	if o.Type != "text" {
		return true
	}
	if w.skip > 0 && o.Turn == w.skipTurn {
		n := min(w.skip, len(o.Text))
		o.Text = o.Text[n:]
		w.skip -= n
	} else {
		w.skip = 0
	}
	if w.round != o.Turn {
		w.round, w.roundBytes = o.Turn, 0
	}
	w.roundBytes += len(o.Text)
	return o.Text != ""
}

// pump delivers the queued outputs to Outputs, which it closes at the end.
func (w *Watch) pump() {
	defer close(w.out)
	deliver := func(o Output) bool {
		if o.Cursor > 0 {
			w.last.Store(o.Cursor)
		}
		select {
		case w.out <- o:
			return true
		case <-w.stop:
			return false
		}
	}
	for {
		select {
		case o := <-w.queue:
			if !deliver(o) {
				return
			}
		case <-w.stop:
			return
		case <-w.ending:
			for {
				select {
				case o := <-w.queue:
					if !deliver(o) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// endWatch forgets w and ends it with err after what is queued.
func (c *Client) endWatch(w *Watch, err error) {
	c.mu.Lock()
	delete(c.open, w)
	if w.sub != "" {
		delete(c.watches, w.sub)
		if w.cn == c.cur {
			c.retired[w.sub] = true
		}
	}
	w.ended = true
	c.mu.Unlock()
	w.endOnce.Do(func() {
		w.err = err
		close(w.ending)
	})
}

// Outputs delivers the session's outputs in order, with no gap and no
// duplicate across reconnects; it is closed when the watch ends.
func (w *Watch) Outputs() <-chan Output { return w.out }

// Running says whether a turn was running when the watch last started.
func (w *Watch) Running() bool {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.running
}

// Cursor is the last cursor delivered (fromCursor before any).
func (w *Watch) Cursor() int64 { return w.last.Load() }

// Err is why the watch ended: nil while it runs and after Close.
func (w *Watch) Err() error {
	select {
	case <-w.ending:
		return w.err
	default:
		return nil
	}
}

// Close stops delivering; the server's outputs of the watch are dropped.
func (w *Watch) Close() error {
	w.c.endWatch(w, nil)
	w.stopped.Do(func() { close(w.stop) })
	return nil
}
