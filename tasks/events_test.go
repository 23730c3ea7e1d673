package tasks_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
)

// eventEnv is a database of the test's own with organization acme /
// project WEB, the other organization globex / GLX, an engineer of WEB and a
// started event hub.
type eventEnv struct {
	db            *store.DB
	hub           *tasks.EventHub
	org, other    store.Organization
	web, glx      store.Project
	engineer      store.Caller
	otherEngineer store.Caller
}

func newEventEnv(t *testing.T) *eventEnv {
	t.Helper()
	ctx := context.Background()
	e := &eventEnv{db: storetest.New(t)}
	sys := store.SystemActor()
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.org, err = e.db.CreateOrganization(ctx, "acme", "Acme", sys)
	must(err)
	e.web, err = e.db.CreateProject(ctx, e.org.ID, "WEB", "Web", sys)
	must(err)
	e.other, err = e.db.CreateOrganization(ctx, "globex", "Globex", sys)
	must(err)
	e.glx, err = e.db.CreateProject(ctx, e.other.ID, "GLX", "Globex", sys)
	must(err)
	bound := func(subject string, scope store.Scope) store.Caller {
		return store.HumanCaller(&store.Principal{Subject: subject, Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: subject, Role: store.RoleEngineer, Scope: scope}}})
	}
	e.engineer = bound("eng@example.com", store.Scope{Kind: store.ScopeProject, OrganizationID: e.org.ID, ProjectID: e.web.ID})
	e.otherEngineer = bound("glx@example.com", store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.other.ID})
	e.hub = tasks.NewEventHub(e.db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	must(e.hub.Start(ctx))
	t.Cleanup(e.hub.Stop)
	return e
}

func (e *eventEnv) item(t *testing.T, title string) store.Item {
	t.Helper()
	it, err := e.db.CreateItem(context.Background(), e.engineer, "WEB", store.NewItem{Kind: store.KindTicket, Title: title})
	if err != nil {
		t.Fatal(err)
	}
	e.number(t)
	return it
}

// bulk appends n events to WEB in one transaction.
func (e *eventEnv) bulk(t *testing.T, n int) {
	t.Helper()
	if _, err := e.db.Pool().Exec(context.Background(), `
		INSERT INTO events (organization_id, project_id, type, entity_type, entity_id, actor_kind, actor_subject)
		SELECT $1, $2, 'test.bulk', 'test', g::text, 'system', 'system' FROM generate_series(1, $3::int) g`,
		e.org.ID, e.web.ID, n); err != nil {
		t.Fatal(err)
	}
	e.number(t)
}

// number numbers what has committed, as the hub's numberer does within
// tasks.EventNumberInterval, so that a test reads the log as it will be.
func (e *eventEnv) number(t *testing.T) {
	t.Helper()
	if _, err := e.db.NumberQueuedEvents(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *eventEnv) latest(t *testing.T) int64 {
	t.Helper()
	e.number(t)
	n, err := e.db.LatestEventSeq(context.Background(), e.org.ID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *eventEnv) subscribe(t *testing.T, stream string, from *int64) *tasks.EventSub {
	t.Helper()
	s, err := e.hub.Subscribe(context.Background(), e.engineer, stream, from)
	if err != nil {
		t.Fatalf("subscribe %s: %v", stream, err)
	}
	t.Cleanup(s.Close)
	return s
}

// collector reads a subscription's events as they come.
type collector struct {
	mu     sync.Mutex
	seqs   []int64
	closed bool
}

func collect(s *tasks.EventSub) *collector {
	c := &collector{}
	go func() {
		for e := range s.Events() {
			c.mu.Lock()
			c.seqs = append(c.seqs, e.Seq)
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	}()
	return c
}

func (c *collector) got() ([]int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.seqs...), c.closed
}

// want is what the log holds for a stream after a number.
func (e *eventEnv) want(t *testing.T, f store.EventFilter, after int64) []int64 {
	t.Helper()
	e.number(t)
	events, err := e.db.EventsAfter(context.Background(), e.org.ID, f, after, 100000)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, ev := range events {
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}

// waitFor waits until c holds want exactly (a duplicate or a gap never
// matches, and the check goes on until the log's events are all seen).
func waitFor(t *testing.T, what string, c *collector, want []int64) {
	t.Helper()
	var last []int64
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		last, _ = c.got()
		return fmt.Sprint(last) == fmt.Sprint(want)
	}) {
		t.Fatalf("%s: got %v, want %v", what, last, want)
	}
}

// TestEventHubNumbersWhatCommits: the hub's own numberer numbers a
// committed event, and its subscribers get it, with no one else numbering.
func TestEventHubNumbersWhatCommits(t *testing.T) {
	t.Parallel()
	e := newEventEnv(t)
	start := e.latest(t)
	c := collect(e.subscribe(t, "project:WEB", nil))
	if _, err := e.db.CreateItem(context.Background(), e.engineer, "WEB", store.NewItem{Kind: store.KindTicket, Title: "numbered by the hub"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event numbered by the hub", c, []int64{start + 1})
}

func TestEventHubReplayThenLiveWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	e := newEventEnv(t)
	ctx := context.Background()
	for i := range 10 {
		e.item(t, fmt.Sprintf("before %d", i))
	}
	from := e.latest(t) - 6
	// Writers in both organizations run while the subscribers join.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				caller, project := e.engineer, "WEB"
				if w == 3 {
					caller, project = e.otherEngineer, "GLX"
				}
				if _, err := e.db.CreateItem(ctx, caller, project, store.NewItem{Kind: store.KindTicket,
					Title: fmt.Sprintf("during %d/%d", w, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	replayed := e.subscribe(t, "project:WEB", &from)
	live := e.subscribe(t, "project:WEB", nil)
	first := e.item(t, "watched")
	item := e.subscribe(t, "item:"+first.Key, ptr(int64(0)))
	r, l, i := collect(replayed), collect(live), collect(item)
	wg.Wait()
	if _, err := e.db.TransitionItem(ctx, e.engineer, first.Key, store.StateReady, first.Version); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replay from "+fmt.Sprint(from), r, e.want(t, store.EventFilter{ProjectID: e.web.ID}, from))
	waitFor(t, "live from the subscription's seq", l, e.want(t, store.EventFilter{ProjectID: e.web.ID}, live.Seq()))
	waitFor(t, "the item's stream", i, e.want(t, store.EventFilter{ItemID: first.ID, ItemKey: first.Key}, 0))
	if got, _ := i.got(); len(got) != 2 {
		t.Fatalf("item stream %v, want its created and state_changed events", got)
	}
	if live.Seq() < from+6 {
		t.Fatalf("live subscription seq %d, want at least the latest %d when it began", live.Seq(), from+6)
	}
}

func TestEventHubCatchesUpAfterListenerKilled(t *testing.T) {
	t.Parallel()
	e := newEventEnv(t)
	ctx := context.Background()
	s := e.subscribe(t, "project:WEB", nil)
	c := collect(s)
	e.item(t, "before")
	waitFor(t, "the first event", c, e.want(t, store.EventFilter{ProjectID: e.web.ID}, s.Seq()))
	listener := func() (pid int) {
		_ = e.db.Pool().QueryRow(ctx, `SELECT COALESCE(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1`, tasks.EventListenerName).Scan(&pid)
		return pid
	}
	storetest.WaitFor(t, "the listener's connection", func() bool { return listener() != 0 })
	pid := listener()
	var killed bool
	if err := e.db.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener: %v, %v", killed, err)
	}
	// Written while the listener is away or coming back: their
	// notifications may be lost; the catch-up on reconnect reads them.
	for i := range 5 {
		e.item(t, fmt.Sprintf("during %d", i))
	}
	storetest.WaitFor(t, "the listener to reconnect", func() bool { return e.hub.Stats().Reconnects >= 1 })
	if now := listener(); now == pid || now == 0 {
		t.Fatalf("listener pid %d after reconnect, was %d", now, pid)
	}
	e.item(t, "after")
	waitFor(t, "every event once, in order", c, e.want(t, store.EventFilter{ProjectID: e.web.ID}, s.Seq()))
}

func TestEventHubLaggingSubscriberEndsAndNeverSlowsOthers(t *testing.T) {
	t.Parallel()
	e := newEventEnv(t)
	start := e.latest(t)
	lazy := e.subscribe(t, "project:WEB", nil)
	reader := e.subscribe(t, "project:WEB", nil)
	c := collect(reader)
	e.bulk(t, tasks.EventBuffer-24) // queued whole for the lazy one
	waitFor(t, "the reader's first batch", c, e.want(t, store.EventFilter{ProjectID: e.web.ID}, start))
	if lazy.Err() != nil {
		t.Fatalf("lazy subscriber ended at %d queued: %v", tasks.EventBuffer-24, lazy.Err())
	}
	e.bulk(t, 100) // 76 more than the lazy one's queue holds
	waitFor(t, "the reader's every event", c, e.want(t, store.EventFilter{ProjectID: e.web.ID}, start))
	storetest.WaitFor(t, "the lazy subscriber to end", func() bool { return lazy.Err() != nil })
	if !errors.Is(lazy.Err(), tasks.ErrLagging) {
		t.Fatalf("lazy err = %v, want %v", lazy.Err(), tasks.ErrLagging)
	}
	// What it was sent stays readable, in order, up to the closed end: it
	// resumes from the last of them.
	var n int
	last := start
	for ev := range lazy.Events() {
		if ev.Seq != last+1 {
			t.Fatalf("lazy event %d after %d", ev.Seq, last)
		}
		last, n = ev.Seq, n+1
	}
	if n != tasks.EventBuffer {
		t.Fatalf("lazy subscriber was queued %d events, want %d", n, tasks.EventBuffer)
	}
	if got := e.hub.Stats().Subscribers; got != 1 {
		t.Fatalf("subscribers = %d, want the reader alone", got)
	}
	again := e.subscribe(t, "project:WEB", &last)
	waitFor(t, "the resubscription from the last seq", collect(again), e.want(t, store.EventFilter{ProjectID: e.web.ID}, last))
}

func TestEventHubStopReleasesEverySubscriber(t *testing.T) {
	t.Parallel()
	e := newEventEnv(t)
	it := e.item(t, "x")
	subs := []*tasks.EventSub{e.subscribe(t, "project:WEB", nil), e.subscribe(t, "project:WEB", ptr(int64(0))),
		e.subscribe(t, "item:"+it.Key, nil)}
	if got := e.hub.Stats(); got.Subscribers != 3 || got.Organizations != 1 {
		t.Fatalf("stats = %+v, want 3 subscribers of 1 organization", got)
	}
	e.hub.Stop()
	for i, s := range subs {
		select {
		case <-s.Done():
		default:
			t.Fatalf("subscriber %d still open after Stop", i)
		}
		if !errors.Is(s.Err(), tasks.ErrHubStopped) {
			t.Fatalf("subscriber %d err = %v, want %v", i, s.Err(), tasks.ErrHubStopped)
		}
		for range s.Events() { // closed: the range ends
		}
	}
	if got := e.hub.Stats(); got.Subscribers != 0 || got.Organizations != 0 {
		t.Fatalf("stats after Stop = %+v", got)
	}
	_, err := e.hub.Subscribe(context.Background(), e.engineer, "project:WEB", nil)
	if !store.IsCode(err, store.CodeUnavailable) {
		t.Fatalf("subscribe after Stop: %v, want unavailable", err)
	}
}

func TestEventHubSubscribeRefusals(t *testing.T) {
	t.Parallel()
	e := newEventEnv(t)
	base := e.latest(t)
	e.bulk(t, store.MaxReplay+1)
	latest := e.latest(t)
	for _, tt := range []struct {
		name   string
		caller store.Caller
		stream string
		from   *int64
		code   store.Code
		msg    string
	}{
		{"more than MaxReplay to replay", e.engineer, "project:WEB", ptr(base), store.CodeResyncRequired,
			fmt.Sprintf("more than 1000 events of project:WEB came after seq %d: reload and subscribe without from_seq", base)},
		{"from_seq past the latest", e.engineer, "project:WEB", ptr(latest + 1), store.CodeResyncRequired, "is past the latest event"},
		{"negative from_seq", e.engineer, "project:WEB", ptr(int64(-1)), store.CodeInvalid, "from_seq: must be a non-negative integer, got -1"},
		{"unknown stream", e.engineer, "session:x", nil, store.CodeInvalid, "is not a stream"},
		{"other organization", e.engineer, "project:GLX", nil, store.CodeNotFound, "project GLX not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := e.hub.Subscribe(context.Background(), tt.caller, tt.stream, tt.from)
			if !store.IsCode(err, tt.code) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %s containing %q", err, tt.code, tt.msg)
			}
		})
	}
	// Exactly MaxReplay is replayed.
	s := e.subscribe(t, "project:WEB", ptr(base+1))
	waitFor(t, "a replay of MaxReplay events", collect(s), e.want(t, store.EventFilter{ProjectID: e.web.ID}, base+1))
	if s.Seq() != latest {
		t.Fatalf("seq = %d, want %d", s.Seq(), latest)
	}
	storetest.WaitFor(t, "only the accepted subscriber to be held", func() bool { return e.hub.Stats().Subscribers == 1 })
}

func ptr[T any](v T) *T { return &v }
