package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/balletplanner/ballet/store"
)

// Why a watch ends, beside Close.
var (
	// ErrLagging: the watcher fell more than WatchBuffer outputs behind.
	// It resumes by watching again from the last cursor it received.
	ErrLagging = errors.New("lagging")
	// ErrHubStopped: the process is shutting down.
	ErrHubStopped = errors.New("shutdown")
)

// WatchBuffer is how many live outputs a watcher may fall behind.
const WatchBuffer = 1024

// replayPage is how many stored outputs one replay query reads.
const replayPage = 500

// subscribeTimeout bounds the wait for Redis to confirm a subscription.
const subscribeTimeout = 10 * time.Second

// item is what the hub queues for a watcher: a live output, or the order
// to resync from Postgres.
type item struct {
	out    *store.Output // shared by every watcher of the channel: read only
	resync bool
}

// round is the running round a watcher shows: its turn, the cursor it
// follows, the attempt its text belongs to, and how many bytes of that
// text were delivered.
type round struct {
	turn       string
	after, end int64
	attempt    int64
}

// Watch is one watcher of a session's outputs: the stored ones after its
// cursor, then the live ones, in order, with no gap and no duplicate.
type Watch struct {
	hub     *Hub
	session store.Session
	channel string
	live    chan item
	out     chan store.Output
	done    chan struct{}
	once    sync.Once
	exited  chan struct{} // closed when run has released the watch
	err     error
	ctx     context.Context
	cancel  context.CancelFunc

	// Owned by the run goroutine.
	last  int64
	round round
	ended string // the last turn whose done was delivered
}

// Watch starts watching a session (tracker.read on its project; another
// organization's session is not found) from after fromCursor. ctx bounds the
// set-up only; the watch lasts until Close, lagging or Hub.Stop. It returns
// once Redis has confirmed the subscription, so that nothing published
// after the replay's read can be missed.
func (h *Hub) Watch(ctx context.Context, caller store.Caller, session string, fromCursor int64) (*Watch, error) {
	if fromCursor < 0 {
		return nil, store.Errorf(store.CodeInvalid, "from_cursor: must be a non-negative integer, got %d", fromCursor)
	}
	s, err := h.db.WatchSession(ctx, caller, session)
	if err != nil {
		return nil, err
	}
	if err := h.db.CheckOutputCursor(ctx, s.ID, fromCursor); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &Watch{hub: h, session: s, channel: h.names.SessionChannel(s.ID), live: make(chan item, WatchBuffer),
		out: make(chan store.Output), done: make(chan struct{}), exited: make(chan struct{}), ctx: wctx, cancel: cancel, last: fromCursor}
	ready, err := h.join(ctx, w)
	if err != nil {
		cancel()
		return nil, store.Errorf(store.CodeUnavailable, "live outputs are unavailable: %v", err)
	}
	timer := time.NewTimer(subscribeTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-w.done:
		h.leave(w)
		return nil, store.Errorf(store.CodeUnavailable, "live outputs are unavailable: %v", w.err)
	case <-timer.C:
		w.fail(nil)
		h.leave(w)
		return nil, store.Errorf(store.CodeUnavailable, "live outputs are unavailable: Redis did not confirm the subscription within %s", subscribeTimeout)
	case <-ctx.Done():
		w.fail(nil)
		h.leave(w)
		return nil, fmt.Errorf("tasks: watch %s: %w", s.ID, ctx.Err())
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		w.fail(ErrHubStopped)
		h.leave(w)
		return nil, store.Errorf(store.CodeUnavailable, "live outputs are unavailable: %v", ErrHubStopped)
	}
	h.runs.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.runs.Done()
		w.run()
	}()
	return w, nil
}

// Session is the watched session as read when the watch began.
func (w *Watch) Session() store.Session { return w.session }

// Outputs delivers the outputs in order; it is closed when the watch ends.
func (w *Watch) Outputs() <-chan store.Output { return w.out }

// Done is closed when the watch ends.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err says why the watch ended: nil after Close, ErrLagging, ErrHubStopped,
// or a replay failure. It is nil while the watch runs.
func (w *Watch) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Close ends the watch and returns once the hub has released it.
func (w *Watch) Close() {
	w.fail(nil)
	<-w.exited
}

func (w *Watch) fail(err error) {
	w.once.Do(func() {
		w.err = err
		w.cancel()
		close(w.done)
	})
}

func (w *Watch) run() {
	defer close(w.exited)
	defer close(w.out)
	defer w.hub.leave(w)
	if !w.catchUp() {
		return
	}
	for {
		select {
		case <-w.done:
			return
		case it := <-w.live:
			if !w.handle(it) {
				return
			}
		}
	}
}

// handle delivers one live item; false ends the watch.
func (w *Watch) handle(it item) bool {
	if it.resync {
		return w.catchUp()
	}
	o := *it.out // a copy of its own: the text may be cut
	switch {
	case o.Cursor > 0:
		if o.Cursor <= w.last {
			return true // replayed already
		}
		if o.Cursor > w.last+1 && !w.replay(o.Cursor-1) { // a gap: stored before it was published
			return false
		}
		return w.deliver(o)
	case o.TextEnd == 0:
		return w.send(o) // no running text kept: nothing to place it in
	case o.TextAfter > w.last:
		// Its round follows an output not delivered yet: fetch it first.
		if !w.replay(o.TextAfter) {
			return false
		}
	}
	if w.round.turn == "" && o.Turn != w.ended {
		if over, ok := w.roundOver(o.Turn, o.TextAfter); !ok || over {
			return ok // a round that ended before this watch's cursor
		}
		w.round = round{turn: o.Turn, after: o.TextAfter} // joined past the round's start
	}
	if o.Turn != w.round.turn || o.TextAfter < w.round.after {
		return true // a round the replay has moved past; its message has the text
	}
	if o.TextAfter > w.round.after {
		return w.catchUpText() // the round's start was missed: the text so far has it
	}
	switch {
	case o.Attempt < w.round.attempt:
		return true // a worker that lost its lease, or a model call made again
	case o.Attempt > w.round.attempt:
		w.round.attempt, w.round.end = o.Attempt, 0 // the round's text starts over
	}
	start := o.TextEnd - int64(len(o.Text))
	switch {
	case o.TextEnd <= w.round.end:
		return true // part of the text so far, sent already
	case start > w.round.end:
		return w.catchUpText() // a delta was lost: the text so far has it
	}
	o.Text = o.Text[w.round.end-start:]
	w.round.end = o.TextEnd
	return w.send(o)
}

// catchUp replays the stored outputs after the last one delivered, then the
// running round's text that follows them. It runs while the channel is live
// (the first time once the subscription is confirmed, later on the
// confirmation of a resubscription), so whatever is stored after its read is
// published later and reaches w.live, in order with the deltas around it.
func (w *Watch) catchUp() bool {
	if !w.replay(0) {
		return false
	}
	p, err := readPartial(w.ctx, w.hub.rdb, w.hub.names, w.session.ID)
	if err != nil || p.Turn == "" {
		if err != nil && w.ctx.Err() == nil {
			w.hub.log.Warn("watch: running text", slog.String("session", w.session.ID), slog.Any("error", err))
		}
		return true
	}
	if p.After > w.last {
		// The round follows an output stored after the replay read: that
		// output and all of the round's deltas come on the live stream. They
		// must not be replayed from here: the watch would run ahead of its
		// own queue and drop the deltas queued before that output (a live
		// delta of the round before it) as of a round it has moved past.
		return true
	}
	return w.sendPartial(p)
}

// catchUpText sends the running round's text beyond what was delivered.
func (w *Watch) catchUpText() bool {
	p, err := readPartial(w.ctx, w.hub.rdb, w.hub.names, w.session.ID)
	if err != nil {
		return true
	}
	return w.sendPartial(p)
}

func (w *Watch) sendPartial(p partial) bool {
	if p.Turn == "" || p.Turn == w.ended || p.After > w.last {
		return true
	}
	switch {
	case w.round.turn == "":
		if over, ok := w.roundOver(p.Turn, p.After); !ok || over {
			return ok // its message is at or before this watch's cursor
		}
		w.round = round{turn: p.Turn, after: p.After}
	case w.round.turn != p.Turn || w.round.after != p.After:
		return true // a round the stream has moved past
	}
	switch {
	case p.Attempt < w.round.attempt:
		return true // the stream is past it already
	case p.Attempt > w.round.attempt:
		w.round.attempt, w.round.end = p.Attempt, 0
	}
	if int64(len(p.Text)) <= w.round.end {
		return true
	}
	text := p.Text[w.round.end:]
	w.round.end = int64(len(p.Text))
	return w.send(store.Output{Session: w.session.ID, Turn: p.Turn, Type: store.OutputText, Text: text,
		Attempt: p.Attempt, TextAfter: p.After, TextEnd: w.round.end})
}

// roundOver reports whether the round of turn that follows cursor after
// has ended at or before the last cursor delivered: a watch that started
// from a cursor past the round (its client had the round's message) must
// not show the round's text, which the running text in Redis may still
// hold for a moment after the message's commit. Only a stored output of
// the same turn ends its round; other turns' outputs (a message queued
// meanwhile) do not. ok is false when the watch ended.
func (w *Watch) roundOver(turn string, after int64) (over, ok bool) {
	for from := after; from < w.last; {
		outs, err := w.hub.db.Outputs(w.ctx, w.session.ID, from, int(min(int64(replayPage), w.last-from)))
		if err != nil {
			if w.ctx.Err() == nil {
				w.fail(fmt.Errorf("tasks: watch %s: round: %w", w.session.ID, err))
			}
			return false, false
		}
		for _, o := range outs {
			if o.Cursor > w.last {
				return false, true
			}
			if o.Turn == turn {
				return true, true
			}
			from = o.Cursor
		}
		if len(outs) == 0 {
			break
		}
	}
	return false, true
}

// replay delivers the stored outputs after the last one delivered, paged,
// up to cursor upTo, or all of them for 0. A live watch fetching a gap stops
// at the gap's end: what follows comes on the stream, in order with the
// deltas between, which a replay running ahead would have to drop.
func (w *Watch) replay(upTo int64) bool {
	for {
		limit := replayPage
		if upTo > 0 {
			if upTo <= w.last {
				return true
			}
			limit = int(min(int64(replayPage), upTo-w.last))
		}
		outs, err := w.hub.db.Outputs(w.ctx, w.session.ID, w.last, limit)
		if err != nil {
			if w.ctx.Err() == nil {
				w.fail(fmt.Errorf("tasks: watch %s: replay: %w", w.session.ID, err))
			}
			return false
		}
		for _, o := range outs {
			if upTo > 0 && o.Cursor > upTo {
				return true
			}
			if !w.deliver(o) {
				return false
			}
		}
		if len(outs) < limit {
			return true
		}
	}
}

// deliver sends a stored output unless it was sent, and follows the
// running round: started begins one, a later output of its turn the next.
func (w *Watch) deliver(o store.Output) bool {
	if o.Cursor <= w.last {
		return true
	}
	w.last = o.Cursor
	switch {
	case o.Type == store.OutputDone:
		w.ended = o.Turn
		if w.round.turn == o.Turn {
			w.round = round{}
		}
	case o.Type == store.OutputStarted, w.round.turn == o.Turn, w.round.turn == "" && o.Type != store.OutputQueued:
		w.round = round{turn: o.Turn, after: o.Cursor}
	}
	return w.send(o)
}

func (w *Watch) send(o store.Output) bool {
	select {
	case w.out <- o:
		return true
	case <-w.done:
		return false
	}
}
