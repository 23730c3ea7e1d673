package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"

	"github.com/balletplanner/ballet/store"
)

// WatchStore is what a Hub needs of Postgres: checking that a caller may
// watch a session, and reading the session's stored outputs by cursor.
// *store.DB provides it.
type WatchStore interface {
	WatchSession(ctx context.Context, caller store.Caller, sessionID string) (store.Session, error)
	Outputs(ctx context.Context, sessionID string, fromCursor int64, limit int) ([]store.Output, error)
	// CheckOutputCursor refuses a cursor retention has deleted past.
	CheckOutputCursor(ctx context.Context, sessionID string, fromCursor int64) error
}

var _ WatchStore = (*store.DB)(nil)

// Hub fans a session's live outputs out to every watcher of it in this
// process, over ONE Redis pub/sub connection: a session's channel is
// subscribed when its first watcher arrives and unsubscribed when its last
// leaves. Pub/sub is at-most-once, so whenever that connection comes back
// (go-redis resubscribes, and Redis confirms each channel again) every
// watcher of the channel is resynced from Postgres by cursor.
type Hub struct {
	db    WatchStore
	rdb   redis.UniversalClient // commands: replay of the running text
	sub   redis.UniversalClient // the pub/sub connection's own client
	own   bool                  // sub was built here and is closed by Stop
	names Names
	log   *slog.Logger
	name  string

	ps     *redis.PubSub
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	channels map[string]*hubChannel
	stopped  bool
	runs     sync.WaitGroup // the watches' run goroutines
	resyncs  atomic.Int64
}

// chanState is where a channel's subscription stands.
type chanState int

const (
	subscribing   chanState = iota // SUBSCRIBE sent, not yet confirmed
	live                           // confirmed: messages arrive
	unsubscribing                  // UNSUBSCRIBE sent, not yet confirmed
)

type hubChannel struct {
	state    chanState
	ready    chan struct{} // closed when the subscription is confirmed
	watchers map[*Watch]struct{}
}

// pingEvery is how long the hub's connection may be silent before it pings;
// a ping left unanswered as long again replaces the connection.
const pingEvery = 15 * time.Second

// NewHub builds a Hub on the process's Redis client. Its pub/sub connection
// gets a client name of its own (ClientName), so that operators can find it
// in CLIENT LIST.
func NewHub(db WatchStore, rdb redis.UniversalClient, names Names, log *slog.Logger) *Hub {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	h := &Hub{db: db, rdb: rdb, names: names, log: log, name: "ballet-hub-" + names.Namespace + hex.EncodeToString(b),
		channels: map[string]*hubChannel{}}
	h.sub, h.own = namedClient(rdb, h.name)
	return h
}

// namedClient is a client like rdb whose connections carry the name.
func namedClient(rdb redis.UniversalClient, name string) (redis.UniversalClient, bool) {
	switch c := rdb.(type) {
	case *redis.Client:
		opt := *c.Options()
		opt.ClientName, opt.PoolSize, opt.MinIdleConns = name, 2, 0
		return redis.NewClient(&opt), true
	case *redis.ClusterClient:
		opt := *c.Options()
		opt.ClientName = name
		return redis.NewClusterClient(&opt), true
	}
	return rdb, false
}

// ClientName is the Redis client name of the hub's pub/sub connection.
func (h *Hub) ClientName() string { return h.name }

// Start opens the pub/sub connection and starts reading it.
func (h *Hub) Start(ctx context.Context) error {
	h.ps = h.sub.Subscribe(context.WithoutCancel(ctx))
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel, h.done = cancel, make(chan struct{})
	go h.read(rctx)
	return nil
}

// Stop closes every watch and the pub/sub connection.
func (h *Hub) Stop() {
	h.mu.Lock()
	h.stopped = true
	var all []*Watch
	for _, st := range h.channels {
		for w := range st.watchers {
			all = append(all, w)
		}
	}
	h.mu.Unlock()
	for _, w := range all {
		w.fail(ErrHubStopped)
	}
	h.runs.Wait() // every watch released: none outlives the hub
	if h.cancel != nil {
		h.cancel()
		_ = h.pubsub().Close()
		<-h.done
	}
	if h.own {
		_ = h.sub.Close()
	}
}

func (h *Hub) pubsub() *redis.PubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ps
}

// HubStats counts what a hub holds.
type HubStats struct {
	Channels int   // subscribed (or subscribing) session channels
	Watchers int   // open watches
	Resyncs  int64 // channel resyncs after the connection came back
}

// Stats reports the hub's channels, watchers and resyncs.
func (h *Hub) Stats() HubStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HubStats{Channels: len(h.channels), Resyncs: h.resyncs.Load()}
	for _, st := range h.channels {
		s.Watchers += len(st.watchers)
	}
	return s
}

// read is the hub's one reader: it routes messages to watchers without ever
// blocking on one, and follows the subscription's confirmations.
func (h *Hub) read(ctx context.Context) {
	defer close(h.done)
	var backoff retry.Backoff // nil while the connection is well
	pinged := false
	for {
		ps := h.pubsub()
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, redis.ErrClosed) {
				continue // replaced
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if pinged {
					h.replace(ctx, errors.New("ping unanswered"))
				} else if err := ps.Ping(ctx); err != nil {
					h.log.WarnContext(ctx, "hub ping", slog.Any("error", err))
				}
				pinged = !pinged
				continue
			}
			// go-redis reconnects (and resubscribes) on the next call.
			h.log.WarnContext(ctx, "hub pub/sub connection lost; resubscribing", slog.Any("error", err))
			h.lost(ctx)
			if backoff == nil {
				backoff = hubBackoff()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(nextWait(backoff)):
			}
			continue
		}
		backoff, pinged = nil, false
		switch m := msg.(type) {
		case *redis.Subscription:
			h.confirmed(ctx, m)
		case *redis.Message:
			h.route(m)
		}
	}
}

// hubBackoff is the schedule of the hub's waits between resubscriptions
// after a lost connection: doubling from 50ms up to 2s.
func hubBackoff() retry.Backoff {
	return retry.WithCappedDuration(2*time.Second, retry.NewExponential(50*time.Millisecond))
}

// nextWait is b's next wait; the schedules here never stop.
func nextWait(b retry.Backoff) time.Duration {
	d, _ := b.Next()
	return d
}

// route hands a message to every watcher of its channel, in a
// planner.fanout span when the output carries a trace context (fanout.go).
func (h *Hub) route(m *redis.Message) {
	p := &published{}
	if err := json.Unmarshal([]byte(m.Payload), p); err != nil {
		h.log.Warn("hub: undecodable output", slog.String("channel", m.Channel), slog.Any("error", err))
		return
	}
	span := startFanout(p, m.Channel)
	watchers, lagging := h.fanout(m.Channel, &p.Output)
	endFanout(span, watchers, lagging)
}

// fanout queues o for every watcher of channel and returns how many got
// it and how many were dropped as lagging.
func (h *Hub) fanout(channel string, o *store.Output) (watchers, lagging int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.channels[channel]
	if st == nil || st.state != live {
		return 0, 0
	}
	// Every watcher's item points at the one decoded output: a queue slot
	// is a few words, and the fan-out copies no output.
	it := item{out: o}
	for w := range st.watchers {
		if h.push(st, w, it) {
			watchers++
		} else {
			lagging++
		}
	}
	return watchers, lagging
}

// push queues an item for a watcher; one that is full is dropped as
// lagging (false). h.mu is held.
func (h *Hub) push(st *hubChannel, w *Watch, it item) bool {
	select {
	case w.live <- it:
		return true
	default:
		delete(st.watchers, w)
		w.fail(ErrLagging)
		return false
	}
}

// confirmed follows Redis's subscribe and unsubscribe confirmations.
func (h *Hub) confirmed(ctx context.Context, m *redis.Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.channels[m.Channel]
	if st == nil {
		return
	}
	switch {
	case m.Kind == "subscribe" && st.state == subscribing:
		if len(st.watchers) == 0 {
			h.unsubscribe(ctx, m.Channel, st)
			return
		}
		st.state = live
		close(st.ready)
	case m.Kind == "subscribe" && st.state == live:
		// Resubscribed after the connection came back: what was published
		// meanwhile is lost to pub/sub, so every watcher replays it.
		h.resyncs.Add(1)
		for w := range st.watchers {
			h.push(st, w, item{resync: true})
		}
	case m.Kind == "unsubscribe" && st.state == unsubscribing:
		h.unsubscribed(ctx, m.Channel, st)
	}
}

// unsubscribed ends an unsubscription: the channel is forgotten, or
// subscribed again for watchers that arrived meanwhile. h.mu is held.
func (h *Hub) unsubscribed(ctx context.Context, ch string, st *hubChannel) {
	if len(st.watchers) == 0 {
		delete(h.channels, ch)
		return
	}
	st.state = subscribing
	h.subscribe(ctx, ch)
}

// lost settles channels whose UNSUBSCRIBE went out on a connection that
// broke: the new connection does not resubscribe them. h.mu is not held.
func (h *Hub) lost(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch, st := range h.channels {
		if st.state == unsubscribing {
			h.unsubscribed(ctx, ch, st)
		}
	}
}

// replace swaps a connection that stopped answering for a new one on the
// channels the hub holds; their confirmations resync the watchers.
func (h *Hub) replace(ctx context.Context, reason error) {
	h.log.WarnContext(ctx, "hub pub/sub connection replaced", slog.Any("reason", reason))
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.ps
	var chans []string
	for ch, st := range h.channels {
		if st.state == unsubscribing {
			if len(st.watchers) == 0 {
				delete(h.channels, ch)
				continue
			}
			st.state = subscribing
		}
		chans = append(chans, ch)
	}
	h.ps = h.sub.Subscribe(ctx, chans...)
	_ = old.Close()
}

// subscribe sends SUBSCRIBE. A write that fails made go-redis reconnect
// without the channel, so it is sent once more; if Redis is away, the
// channel is resubscribed with the others when it is back. h.mu is held.
func (h *Hub) subscribe(ctx context.Context, ch string) {
	if err := h.ps.Subscribe(ctx, ch); err != nil {
		if err := h.ps.Subscribe(ctx, ch); err != nil {
			h.log.WarnContext(ctx, "hub subscribe", slog.String("channel", ch), slog.Any("error", err))
		}
	}
}

// unsubscribe sends UNSUBSCRIBE for a channel whose last watcher left.
// h.mu is held.
func (h *Hub) unsubscribe(ctx context.Context, ch string, st *hubChannel) {
	if st.state == live {
		st.ready = make(chan struct{}) // watchers arriving meanwhile wait for the next SUBSCRIBE
	}
	st.state = unsubscribing
	if err := h.ps.Unsubscribe(ctx, ch); err != nil {
		h.log.WarnContext(ctx, "hub unsubscribe", slog.String("channel", ch), slog.Any("error", err))
	}
}

// join adds a watcher and returns what closes once its channel is live.
func (h *Hub) join(ctx context.Context, w *Watch) (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.ps == nil {
		return nil, ErrHubStopped
	}
	st := h.channels[w.channel]
	if st == nil {
		st = &hubChannel{state: subscribing, ready: make(chan struct{}), watchers: map[*Watch]struct{}{}}
		h.channels[w.channel] = st
		h.subscribe(context.WithoutCancel(ctx), w.channel)
	}
	st.watchers[w] = struct{}{}
	return st.ready, nil
}

// leave removes a watcher; the last one of a live channel unsubscribes it.
func (h *Hub) leave(w *Watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.channels[w.channel]
	if st == nil {
		return
	}
	delete(st.watchers, w)
	if len(st.watchers) == 0 && st.state == live && !h.stopped {
		h.unsubscribe(context.Background(), w.channel, st)
	}
}
