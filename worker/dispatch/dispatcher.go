package dispatch

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Timings of the dispatcher.
const (
	// campaignEvery is how often a standby tries to take the lead: a
	// killed leader's connection, and with it the lock, goes at once, so a
	// standby leads within this long.
	campaignEvery = 500 * time.Millisecond
	// slotsEvery is how often the leader reads the pool's capacity.
	slotsEvery = time.Second
	// resyncEvery is how often the leader reloads the whole backlog, in
	// case a notification went astray.
	resyncEvery = 30 * time.Second
	// tick wakes the leader when nothing else does.
	tick = 250 * time.Millisecond
	// batchMax bounds the turns dispatched in one step.
	batchMax = 200
	// confirmAfter is how long a dispatched turn may stay unclaimed before
	// the leader makes sure its task is in the queue, and confirmEvery how
	// often it looks.
	confirmAfter = 2 * time.Second
	confirmEvery = time.Second
	// retryWait is the wait after a failure before the dispatcher connects
	// again.
	retryWait = time.Second
)

// Store is what the dispatcher needs of Postgres; *store.DB provides it.
type Store interface {
	OpenDispatchConn(ctx context.Context) (*store.DispatchConn, error)
	ListenDispatch(ctx context.Context) (*pgx.Conn, error)
}

// Enqueuer puts a dispatched turn's task in the queue; *tasks.Queue
// provides it. Enqueue is a no-op when a task with the id exists;
// EnqueueFresh also enqueues beside a task a worker took and did not
// finish.
type Enqueuer interface {
	Enqueue(ctx context.Context, session, turn, taskID string) error
	EnqueueFresh(ctx context.Context, session, turn, taskID string) (string, tasks.Resumed, error)
}

// Dispatcher is one worker process's candidate for dispatching: it campaigns
// for the lead (a Postgres advisory lock on a connection of its own) and,
// while it leads, keeps the backlog in a tree (fair.go) fed by the
// ballet_dispatch notifications, and dispatches a ready turn for every free
// slot of the pool. Start runs it; Stop ends it.
type Dispatcher struct {
	db      Store
	queue   Enqueuer
	caps    Caps
	log     *slog.Logger
	metrics *Metrics

	wake  chan struct{}
	mu    sync.Mutex
	notes []store.DispatchNote
	stale bool // a (re)connected listener asks for a resync

	life startstop.Base
	// thread and listening measure the CPU of the dispatcher's goroutines:
	// the one that campaigns and leads, and its listener's.
	thread, listening *threadMeter
}

// New builds a dispatcher; m may be shared by the dispatchers of one
// registry.
func New(db Store, queue Enqueuer, cfg Config, m *Metrics, log *slog.Logger) *Dispatcher {
	return &Dispatcher{db: db, queue: queue, caps: cfg.caps(), log: log, metrics: m, wake: make(chan struct{}, 1)}
}

// Start campaigns and dispatches in the background until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	if _, ok := d.life.StartInit(ctx); ok {
		d.life.Go(d.run)
	}
	return nil
}

// Stop ends the dispatcher and waits for it; its lock goes with its
// connection. Safe before Start and twice.
func (d *Dispatcher) Stop() { d.life.Stop() }

func (d *Dispatcher) run(ctx context.Context) {
	d.thread = d.metrics.meter()
	defer d.thread.stop()
	for ctx.Err() == nil {
		conn, err := d.db.OpenDispatchConn(ctx)
		if err == nil {
			var led bool
			led, err = d.campaign(ctx, conn)
			if led {
				err = d.lead(ctx, conn)
			}
			conn.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.log.WarnContext(ctx, "dispatcher", slog.Any("error", err), slog.Duration("retry_in", retryWait))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryWait):
		}
	}
}

// campaign tries to take the lead until it has it, ctx ends or the
// connection fails.
func (d *Dispatcher) campaign(ctx context.Context, conn *store.DispatchConn) (bool, error) {
	t := time.NewTicker(campaignEvery)
	defer t.Stop()
	for {
		ok, err := conn.TryLead(ctx)
		if err != nil || ok {
			return ok, err
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
		}
	}
}

// note queues a notification's payload for the leader's loop.
func (d *Dispatcher) note(ctx context.Context, payload string) {
	var n store.DispatchNote
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		d.log.WarnContext(ctx, "dispatcher: bad notification", slog.String("payload", payload), slog.Any("error", err))
		return
	}
	d.mu.Lock()
	d.notes = append(d.notes, n)
	d.mu.Unlock()
	d.poke()
	d.listening.tick()
}

func (d *Dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// take returns the queued notifications and whether a resync is asked for.
func (d *Dispatcher) take() ([]store.DispatchNote, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	notes, stale := d.notes, d.stale
	d.notes, d.stale = nil, false
	return notes, stale
}

// lead dispatches while conn holds the lock; an error of conn ends it.
func (d *Dispatcher) lead(ctx context.Context, conn *store.DispatchConn) error {
	lctx, cancel := context.WithCancel(ctx)
	listening := make(chan struct{})
	var once sync.Once
	l := tasks.Listener{Name: "dispatcher", Connect: d.db.ListenDispatch, Log: d.log, Notify: d.note,
		Connected: func(context.Context, bool) {
			d.mu.Lock()
			d.stale = true
			d.mu.Unlock()
			once.Do(func() { close(listening) })
			d.poke()
		}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.listening = d.metrics.meter()
		defer d.listening.stop()
		l.Run(lctx)
	}()
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-ctx.Done():
		return nil
	case <-listening:
	}
	d.metrics.tookLead()
	defer d.metrics.lostLead()
	d.log.InfoContext(ctx, "dispatcher leads")
	s := &session{d: d, conn: conn, tree: newTree(d.caps)}
	defer func() {
		if s.paced != nil {
			s.paced.Stop()
		}
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		err := s.step(ctx)
		d.thread.tick()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-t.C:
		}
	}
}

// session is one stretch of leadership.
type session struct {
	d        *Dispatcher
	conn     *store.DispatchConn
	tree     *tree
	slots    int
	slotsAt  time.Time
	syncedAt time.Time
	shownAt  time.Time
	// confirmedAt is when the leader last looked for dispatched turns
	// that no worker claimed.
	confirmedAt time.Time
	// lastStart is the last dispatch, and paced the wake-up set for the
	// next one that staggering allows (see dispatch).
	lastStart time.Time
	paced     *time.Timer
}

// step applies what happened since the last step and fills the free slots.
func (s *session) step(ctx context.Context) error {
	notes, stale := s.d.take()
	now := time.Now()
	if stale || now.Sub(s.syncedAt) >= resyncEvery {
		if err := s.resync(ctx, now); err != nil {
			return err
		}
	}
	if err := s.apply(ctx, notes, now); err != nil {
		return err
	}
	if now.Sub(s.slotsAt) >= slotsEvery {
		n, err := s.conn.Slots(ctx)
		if err != nil {
			return err
		}
		s.slots, s.slotsAt = n, now
	}
	if err := s.dispatch(ctx); err != nil {
		return err
	}
	if now.Sub(s.confirmedAt) >= confirmEvery {
		s.confirmedAt = now
		if err := s.confirm(ctx, now); err != nil {
			return err
		}
	}
	if now.Sub(s.shownAt) >= time.Second {
		s.shownAt = now
		s.d.metrics.show(s.tree, s.slots, now)
	}
	return nil
}

// resync rebuilds the tree from Postgres, and reads every key's settings.
func (s *session) resync(ctx context.Context, now time.Time) error {
	turns, err := s.conn.Snapshot(ctx)
	if err != nil {
		return err
	}
	s.tree.reset(turns, now)
	if err := s.loadSettings(ctx, true); err != nil {
		return err
	}
	s.syncedAt = now
	return nil
}

// loadSettings reads the settings of every key in the tree (all) or of
// those not read yet.
func (s *session) loadSettings(ctx context.Context, all bool) error {
	var orgs, projects []string
	for _, org := range s.tree.root.children {
		if _, ok := s.tree.settings[org.id]; all || !ok {
			orgs = append(orgs, org.id)
		}
		for _, p := range org.children {
			if _, ok := s.tree.settings[p.id]; all || !ok {
				projects = append(projects, p.id)
			}
		}
	}
	if len(orgs)+len(projects) == 0 {
		if all {
			s.tree.setSettings(map[string]store.ScopeSettings{})
		}
		return nil
	}
	got, err := s.conn.Settings(ctx, orgs, projects)
	if err != nil {
		return err
	}
	if all {
		s.tree.setSettings(got)
	} else {
		s.tree.addSettings(got)
	}
	return nil
}

// apply brings the notifications into the tree.
func (s *session) apply(ctx context.Context, notes []store.DispatchNote, now time.Time) error {
	fresh, reload := false, false
	for _, n := range notes {
		switch n.Kind {
		case "r":
			if _, ok := s.tree.settings[n.Organization]; !ok {
				fresh = true
			}
			if _, ok := s.tree.settings[n.Project]; !ok {
				fresh = true
			}
			s.tree.add(store.DispatchTurn{ID: n.Turn, Session: n.Session, Organization: n.Organization,
				Project: n.Project, Human: n.Human, Batch: n.Batch, Dispatched: n.Dispatched, ReadyAt: now, RequestID: n.RequestID,
				TraceContext: n.TraceContext}, now)
		case "e":
			s.tree.remove(n.Turn, now)
		case "w":
			reload = true
		}
	}
	if reload || fresh {
		return s.loadSettings(ctx, reload)
	}
	return nil
}
