package tasks

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sethvargo/go-retry"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// EventBuffer is how many events a stream subscriber may fall behind
// before it ends with ErrLagging.
const EventBuffer = 1024

// eventPage is how many events one read of an organization's log takes.
const eventPage = 500

// Timings of the event listener.
const (
	fetchRetryAfter = time.Second
)

// EventListenerName is the application_name of the hub's LISTEN
// connection, for finding it in pg_stat_activity.
const EventListenerName = "ballet-events"

// EventStore is what an EventHub needs of Postgres: a connection
// listening for new events, reads of an organization's event log, and the
// resolving of a stream's name for a caller. *store.DB provides it.
type EventStore interface {
	ListenEvents(ctx context.Context, name string) (*pgx.Conn, error)
	EventsAfter(ctx context.Context, organizationID string, f store.EventFilter, afterSeq int64, limit int) ([]store.Event, error)
	LatestEventSeq(ctx context.Context, organizationID string) (int64, error)
	ResolveStream(ctx context.Context, caller store.Caller, name string) (store.Stream, error)
	// CheckEventSeq refuses a number retention has deleted past.
	CheckEventSeq(ctx context.Context, organizationID string, fromSeq int64) error
}

var _ EventStore = (*store.DB)(nil)

// EventHub follows the event log for this process's stream subscribers.
// Events are numbered after commit, and each numbering NOTIFYs every
// organization's highest new number (store.EventsChannel); the hub runs an
// EventNumberer when its store can number. The
// hub holds ONE listening connection and takes a notification only as a
// nudge: on one for an organization it reads that organization's new events
// once, from the lowest number any of its subscribers has reached, and hands
// each to the subscribers whose stream it belongs to. Whenever the
// connection comes back, every subscriber is caught up from the log, so a
// lost notification delays events but never loses one.
type EventHub struct {
	db  EventStore
	log *slog.Logger

	numberer *EventNumberer // nil when the store cannot number events

	kick chan struct{} // wakes the fetcher; dirty says for what
	life startstop.Base

	mu      sync.Mutex
	orgs    map[string]map[*EventSub]struct{}
	dirty   map[string]int64 // organizations to read: the number hinted, 0 to read whatever
	started bool
	stopped bool

	reconnects atomic.Int64
	fetches    atomic.Int64
}

// NewEventHub builds an EventHub on the event log of db.
func NewEventHub(db EventStore, log *slog.Logger) *EventHub {
	if log == nil {
		log = slog.Default()
	}
	h := &EventHub{db: db, log: log, kick: make(chan struct{}, 1),
		orgs: map[string]map[*EventSub]struct{}{}, dirty: map[string]int64{}}
	if ns, ok := db.(EventNumberStore); ok {
		h.numberer = NewEventNumberer(ns, log)
	}
	return h
}

// Start starts listening. A database that cannot be reached is retried
// in the background; subscribers are caught up once it answers. A hub
// stopped is not started again.
func (h *EventHub) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.stopped {
		return nil
	}
	h.started = true
	run, _ := h.life.StartInit(ctx)
	h.life.Go(h.listen)
	h.life.Go(h.fetch)
	if h.numberer != nil {
		return h.numberer.Start(run)
	}
	return nil
}

// Stop ends every subscription with ErrHubStopped and returns once the
// listener and the fetcher are gone.
func (h *EventHub) Stop() {
	h.mu.Lock()
	h.stopped = true
	for _, subs := range h.orgs {
		for s := range subs {
			h.end(s, ErrHubStopped)
		}
	}
	h.mu.Unlock()
	h.life.Stop()
	if h.numberer != nil {
		h.numberer.Stop()
	}
}

// EventHubStats counts what an event hub holds.
type EventHubStats struct {
	Organizations int   // organizations with subscribers
	Subscribers   int   // open subscriptions
	Reconnects    int64 // times the LISTEN connection came back after a loss
	Fetches       int64 // reads of an organization's log
}

// Stats reports the hub's subscribers, reconnects and reads.
func (h *EventHub) Stats() EventHubStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := EventHubStats{Organizations: len(h.orgs), Reconnects: h.reconnects.Load(), Fetches: h.fetches.Load()}
	for _, subs := range h.orgs {
		s.Subscribers += len(subs)
	}
	return s
}

// listen holds the LISTEN connection, reconnecting with backoff, and turns
// notifications into organizations to read.
func (h *EventHub) listen(ctx context.Context) {
	Listener{
		Name:    "event listener",
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return h.db.ListenEvents(ctx, EventListenerName) },
		Connected: func(ctx context.Context, reconnect bool) {
			if reconnect {
				h.reconnects.Add(1)
				h.log.InfoContext(ctx, "event listener reconnected; catching subscribers up")
			}
			h.markAll() // whatever was committed while nobody listened
		},
		Notify: func(ctx context.Context, payload string) {
			org, seq, ok := store.ParseEventNotification(payload)
			if !ok {
				h.log.WarnContext(ctx, "event listener: unreadable notification", slog.String("payload", payload))
				return
			}
			h.mark(org, seq)
		},
		Log: h.log,
	}.Run(ctx)
}

// listenerBackoff is the schedule of a listener's waits between failed
// connects: doubling from listenBackoff up to listenMaxWait.
func listenerBackoff() retry.Backoff {
	return retry.WithCappedDuration(listenMaxWait, retry.NewExponential(listenBackoff))
}

// mark asks the fetcher to read an organization's log up to seq (0: read
// whatever is new); an organization nobody follows here is ignored.
func (h *EventHub) mark(org string, seq int64) {
	h.mu.Lock()
	if _, ok := h.orgs[org]; ok {
		if cur, queued := h.dirty[org]; !queued || (cur != 0 && (seq == 0 || seq > cur)) {
			h.dirty[org] = seq
		}
	}
	h.mu.Unlock()
	h.wake()
}

// markAll asks the fetcher to read every followed organization's log.
func (h *EventHub) markAll() {
	h.mu.Lock()
	for org := range h.orgs {
		h.dirty[org] = 0
	}
	h.mu.Unlock()
	h.wake()
}

func (h *EventHub) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// fetch is the one reader of the log: it reads each marked organization.
func (h *EventHub) fetch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		}
		h.mu.Lock()
		dirty := h.dirty
		h.dirty = map[string]int64{}
		h.mu.Unlock()
		for org, hint := range dirty {
			if err := h.catchUp(ctx, org, hint); err != nil {
				if ctx.Err() != nil {
					return
				}
				h.log.WarnContext(ctx, "event hub: read the log", slog.String("organization", org), slog.Any("error", err))
				time.AfterFunc(fetchRetryAfter, func() { h.mark(org, 0) })
			}
		}
	}
}

// catchUp reads an organization's events after the lowest number its
// subscribers reached, page by page, and delivers them; with a hint it
// reads nothing when every subscriber is past it already.
func (h *EventHub) catchUp(ctx context.Context, org string, hint int64) error {
	for {
		h.mu.Lock()
		from, found := int64(0), false
		for s := range h.orgs[org] {
			if !found || s.last < from {
				from, found = s.last, true
			}
		}
		h.mu.Unlock()
		if !found || (hint > 0 && from >= hint) {
			return nil
		}
		h.fetches.Add(1)
		events, err := h.db.EventsAfter(ctx, org, store.EventFilter{}, from, eventPage)
		if err != nil {
			return err
		}
		h.mu.Lock()
		for _, e := range events {
			for s := range h.orgs[org] {
				h.offer(s, e)
			}
		}
		h.mu.Unlock()
		if len(events) < eventPage {
			return nil
		}
	}
}

// offer hands e to a subscriber that has not passed it, if its stream
// holds it; a subscriber whose queue is full ends as lagging. h.mu is held.
func (h *EventHub) offer(s *EventSub, e store.Event) {
	if e.Seq <= s.last {
		return
	}
	s.last = e.Seq
	if !s.stream.Filter.Matches(e) {
		return
	}
	select {
	case s.events <- e:
	default:
		h.end(s, ErrLagging)
	}
}

// end removes a subscriber and closes it with err. h.mu is held.
func (h *EventHub) end(s *EventSub, err error) {
	select {
	case <-s.done:
		return
	default:
	}
	subs := h.orgs[s.stream.OrganizationID]
	delete(subs, s)
	if len(subs) == 0 {
		delete(h.orgs, s.stream.OrganizationID)
		delete(h.dirty, s.stream.OrganizationID)
	}
	s.err = err
	close(s.done)
	close(s.events)
}
