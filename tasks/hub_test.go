package tasks_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// hubEnv is a database and Redis namespace of the test's own, with a
// session, a publisher and a started hub.
type hubEnv struct {
	db       *store.DB
	rdb      redis.UniversalClient
	names    tasks.Names
	pub      *tasks.Publisher
	hub      *tasks.Hub
	human    store.Caller
	outsider store.Caller
	log      *slog.Logger
}

func newHubEnv(t testing.TB) *hubEnv {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t)
	rdb, rc := taskstest.New(t)
	e := &hubEnv{db: db, rdb: rdb, names: tasks.Names{Namespace: rc.Namespace},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.pub = tasks.NewPublisher(rdb, e.names, e.log)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", sys)
	must(t, err)
	project, err := db.CreateProject(ctx, org.ID, "WEB", "Web", sys)
	must(t, err)
	other, err := db.CreateOrganization(ctx, "globex", "Globex", sys)
	must(t, err)
	e.human = store.HumanCaller(&store.Principal{Subject: "ann@example.com", Kind: store.ActorHuman,
		Bindings: []store.RoleBinding{{Subject: "ann@example.com", Role: store.RoleEngineer,
			Scope: store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: project.ID}}}})
	e.outsider = store.HumanCaller(&store.Principal{Subject: "out@example.com", Kind: store.ActorHuman,
		Bindings: []store.RoleBinding{{Subject: "out@example.com", Role: store.RoleOrganizationAdmin,
			Scope: store.Scope{Kind: store.ScopeOrganization, OrganizationID: other.ID}}}})
	e.hub = e.newHub(t)
	return e
}

func (e *hubEnv) newHub(t testing.TB) *tasks.Hub {
	t.Helper()
	h := tasks.NewHub(e.db, e.rdb, e.names, e.log)
	must(t, h.Start(context.Background()))
	t.Cleanup(h.Stop)
	return h
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// turn is a session with one sent and claimed turn: outputs queued (1) and
// started (2) are stored and published.
type turn struct {
	session string
	fence   store.Fence
}

func (e *hubEnv) startTurn(t testing.TB) turn {
	t.Helper()
	ctx := context.Background()
	s, err := e.db.CreateSession(ctx, e.human, "WEB", "plan")
	must(t, err)
	res, err := e.db.SendMessage(ctx, e.human, s.ID, "hello", "", store.QueueLimits{})
	must(t, err)
	e.pub.Publish(ctx, res.Queued)
	claim, err := e.db.ClaimTurn(ctx, res.Turn, "test-worker", time.Minute)
	must(t, err)
	e.pub.Publish(ctx, claim.Outputs...)
	return turn{session: s.ID, fence: claim.Fence}
}

// store commits tool_call outputs of the turn and returns them unpublished.
func (e *hubEnv) store(t *testing.T, tr turn, n int) []store.Output {
	t.Helper()
	outs := make([]store.Output, n)
	for i := range outs {
		outs[i] = store.Output{Turn: tr.fence.Turn, Type: store.OutputToolCall, Tool: "list_items",
			ToolUseID: fmt.Sprintf("toolu_%d", i), Input: []byte(`{}`)}
	}
	stored, err := e.db.AppendOutputs(context.Background(), tr.fence, outs...)
	must(t, err)
	return stored
}

func (e *hubEnv) text(tr turn, deltas ...string) {
	for _, d := range deltas {
		e.pub.Publish(context.Background(), store.Output{Session: tr.session, Turn: tr.fence.Turn, Type: store.OutputText, Text: d})
	}
}

func (e *hubEnv) watch(t testing.TB, h *tasks.Hub, session string, from int64) *tasks.Watch {
	t.Helper()
	w, err := h.Watch(context.Background(), e.human, session, from)
	must(t, err)
	t.Cleanup(w.Close)
	return w
}

// expect reads from a watch until what it delivered renders as want.
func expect(t *testing.T, w *tasks.Watch, want string) {
	t.Helper()
	var got []store.Output
	timeout := time.NewTimer(storetest.WaitTimeout)
	defer timeout.Stop()
	for render(got) != want {
		select {
		case o, ok := <-w.Outputs():
			if !ok {
				t.Fatalf("watch ended (%v) with %q, want %q", w.Err(), render(got), want)
			}
			got = append(got, o)
		case <-timeout.C:
			t.Fatalf("timed out with %q, want %q", render(got), want)
		}
	}
}

// settle stores and publishes one tool call and waits until every watch
// has it: from then on each is past its replay.
func (e *hubEnv) settle(t *testing.T, tr turn, want string, watches ...*tasks.Watch) {
	t.Helper()
	e.pub.Publish(context.Background(), e.store(t, tr, 1)...)
	for _, w := range watches {
		expect(t, w, want)
	}
}

// render writes outputs as "cursor:type" or "text(…)", to compare; a
// client shows adjacent text deltas as one text, so they are joined.
func render(outs []store.Output) string {
	var b []string
	for i, o := range outs {
		if o.Type == store.OutputText {
			if i > 0 && outs[i-1].Type == store.OutputText {
				b[len(b)-1] = strings.TrimSuffix(b[len(b)-1], ")") + o.Text + ")"
				continue
			}
			b = append(b, "text("+o.Text+")")
		} else {
			b = append(b, fmt.Sprintf("%d:%s", o.Cursor, o.Type))
		}
	}
	return strings.Join(b, " ")
}

func TestWatchReplaysThenGoesLive(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	tests := []struct {
		name   string
		from   int64
		replay string
	}{
		{"from the start", 0, "1:queued 2:started 3:tool_call"},
		{"after the first", 1, "2:started 3:tool_call"},
		{"after the last", 2, "3:tool_call"},
	}
	watches := make([]*tasks.Watch, len(tests))
	for i, tt := range tests {
		watches[i] = e.watch(t, e.hub, tr.session, tt.from)
	}
	e.pub.Publish(context.Background(), e.store(t, tr, 1)...)
	for i, tt := range tests {
		expect(t, watches[i], tt.replay)
	}
	e.text(tr, "Let me ", "look.")
	e.pub.Publish(context.Background(), e.store(t, tr, 2)...)
	for i := range tests {
		expect(t, watches[i], "text(Let me look.) 4:tool_call 5:tool_call")
	}
	if st := e.hub.Stats(); st.Channels != 1 || st.Watchers != 3 {
		t.Fatalf("stats %+v, want one channel with three watchers", st)
	}
}

// A watcher that joins mid-round gets the round's text so far once, then
// only the deltas after it.
func TestWatchJoinsMidRound(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	first := e.watch(t, e.hub, tr.session, 2)
	e.settle(t, tr, "3:tool_call", first)
	e.text(tr, "Hel", "lo")
	expect(t, first, "text(Hello)")
	late := e.watch(t, e.hub, tr.session, 0)
	expect(t, late, "1:queued 2:started 3:tool_call text(Hello)")
	e.text(tr, " world")
	expect(t, late, "text( world)")
	expect(t, first, "text( world)")
	// After a stored output a new round begins: a joiner gets its text only.
	e.pub.Publish(context.Background(), e.store(t, tr, 1)...)
	e.text(tr, "Next")
	expect(t, first, "4:tool_call text(Next)")
	third := e.watch(t, e.hub, tr.session, 4)
	expect(t, third, "text(Next)")
	// Once the turn is done, a joiner gets no running text.
	outs, _, err := e.db.FinishTurn(context.Background(), tr.fence, store.TurnOutcome{Status: store.TurnDone, Reason: store.ReasonEndTurn}, nil)
	must(t, err)
	e.pub.Publish(context.Background(), outs...)
	expect(t, first, "5:done")
	after := e.watch(t, e.hub, tr.session, 0)
	expect(t, after, "1:queued 2:started 3:tool_call 4:tool_call 5:done")
	e.settleQuiet(t, after)
}

// settleQuiet checks that a watch delivers nothing more: a live output
// published now is the next thing it gets.
func (e *hubEnv) settleQuiet(t *testing.T, w *tasks.Watch) {
	t.Helper()
	s := w.Session()
	res, err := e.db.SendMessage(context.Background(), e.human, s.ID, "more", "", store.QueueLimits{})
	must(t, err)
	e.pub.Publish(context.Background(), res.Queued)
	expect(t, w, fmt.Sprintf("%d:queued", res.Queued.Cursor))
}

func TestWatchRefusals(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	tests := []struct {
		name    string
		caller  store.Caller
		session string
		from    int64
		code    store.Code
		msg     string
	}{
		{"negative cursor", e.human, tr.session, -1, store.CodeInvalid, "from_cursor: must be a non-negative integer"},
		{"other organization", e.outsider, tr.session, 0, store.CodeNotFound, "not found"},
		{"unknown session", e.human, "00000000-0000-0000-0000-000000000000", 0, store.CodeNotFound, "not found"},
		{"not a session id", e.human, "WEB", 0, store.CodeNotFound, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := e.hub.Watch(context.Background(), tt.caller, tt.session, tt.from)
			if err == nil {
				w.Close()
				t.Fatal("watch allowed")
			}
			if !store.IsCode(err, tt.code) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want %s containing %q", err, tt.code, tt.msg)
			}
		})
	}
	if st := e.hub.Stats(); st.Channels != 0 || st.Watchers != 0 {
		t.Fatalf("refused watches left %+v", st)
	}
}

// hubConn finds the hub's pub/sub connection in CLIENT LIST: its id and
// how many channels it holds.
func hubConn(t *testing.T, rdb redis.UniversalClient, name string) (id string, subs int, n int) {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	must(t, err)
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") {
			continue
		}
		n++
		id = regexp.MustCompile(`^id=(\d+)`).FindStringSubmatch(line)[1]
		fmt.Sscanf(regexp.MustCompile(` sub=(\d+)`).FindStringSubmatch(line)[1], "%d", &subs)
	}
	return id, subs, n
}

// Many watchers of a few sessions share one connection; a channel lives
// while it has watchers.
func TestHubMultiplexesOneConnection(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	var turns []turn
	for range 3 {
		turns = append(turns, e.startTurn(t))
	}
	var watches []*tasks.Watch
	for i := range 30 {
		watches = append(watches, e.watch(t, e.hub, turns[i%3].session, 2))
	}
	_, subs, conns := hubConn(t, e.rdb, e.hub.ClientName())
	if conns != 1 || subs != 3 {
		t.Fatalf("%d hub connections holding %d channels, want 1 holding 3", conns, subs)
	}
	for _, w := range watches {
		w.Close()
	}
	storetest.WaitFor(t, "the hub to unsubscribe every channel", func() bool {
		_, subs, _ := hubConn(t, e.rdb, e.hub.ClientName())
		return subs == 0 && e.hub.Stats().Channels == 0
	})
	// Joining and leaving in quick succession never loses the subscription.
	for range 20 {
		e.watch(t, e.hub, turns[0].session, 2).Close()
	}
	w := e.watch(t, e.hub, turns[0].session, 2)
	e.pub.Publish(context.Background(), e.store(t, turns[0], 1)...)
	expect(t, w, "3:tool_call")
}

// When the hub's connection is killed, go-redis resubscribes; what was
// stored meanwhile reaches the watcher from Postgres, exactly once.
func TestWatchResyncsAfterReconnect(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	w := e.watch(t, e.hub, tr.session, 0)
	expect(t, w, "1:queued 2:started")
	lost := e.store(t, tr, 3) // stored; their publish is lost in the outage
	id, _, _ := hubConn(t, e.rdb, e.hub.ClientName())
	must(t, e.rdb.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err())
	expect(t, w, "3:tool_call 4:tool_call 5:tool_call")
	// Publishing them late, and more after, delivers each once.
	e.pub.Publish(context.Background(), lost...)
	e.pub.Publish(context.Background(), e.store(t, tr, 1)...)
	expect(t, w, "6:tool_call")
	if st := e.hub.Stats(); st.Resyncs < 1 {
		t.Fatalf("stats %+v: no resync counted", st)
	}
}

// A watcher that never reads is dropped as lagging; a fast one gets all.
func TestSlowWatcherIsDroppedAsLagging(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	slow := e.watch(t, e.hub, tr.session, 2)
	fast := e.watch(t, e.hub, tr.session, 2)
	const n = tasks.WatchBuffer + 200
	outs := e.store(t, tr, n)
	done := make(chan []store.Output)
	var read atomic.Int64
	go func() {
		var got []store.Output
		for o := range fast.Outputs() {
			got = append(got, o)
			read.Store(int64(len(got)))
			if len(got) == n {
				break
			}
		}
		done <- got
	}()
	// Published in steps the fast watcher reads before the next, so it is
	// never far behind however slow the machine; the slow one falls behind
	// by all of them.
	const step = 100
	for i := 0; i < n; i += step {
		end := min(i+step, n)
		e.pub.Publish(context.Background(), outs[i:end]...)
		storetest.WaitFor(t, fmt.Sprintf("the fast watcher to read %d outputs", end), func() bool {
			return read.Load() >= int64(end) || fast.Err() != nil
		})
	}
	select {
	case <-slow.Done():
	case <-time.After(storetest.WaitTimeout):
		t.Fatal("the slow watcher was not dropped")
	}
	if slow.Err() != tasks.ErrLagging {
		t.Fatalf("slow watcher ended with %v, want lagging", slow.Err())
	}
	got := <-done
	for i, o := range got {
		if o.Cursor != int64(i+3) {
			t.Fatalf("fast watcher: output %d has cursor %d", i, o.Cursor)
		}
	}
	if len(got) != n || fast.Err() != nil {
		t.Fatalf("fast watcher got %d of %d (%v)", len(got), n, fast.Err())
	}
}

// Two hubs (two api processes) both deliver the same session.
func TestTwoHubsBothDeliver(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	other := e.newHub(t)
	tr := e.startTurn(t)
	a := e.watch(t, e.hub, tr.session, 2)
	b := e.watch(t, other, tr.session, 2)
	e.settle(t, tr, "3:tool_call", a, b)
	e.text(tr, "hi")
	e.pub.Publish(context.Background(), e.store(t, tr, 1)...)
	expect(t, a, "text(hi) 4:tool_call")
	expect(t, b, "text(hi) 4:tool_call")
	other.Stop()
	select {
	case <-b.Done():
	case <-time.After(storetest.WaitTimeout):
		t.Fatal("Stop left a watch open")
	}
	if b.Err() != tasks.ErrHubStopped {
		t.Fatalf("stopped watch: %v", b.Err())
	}
}

// A delta that reaches a watcher after its replay passed the delta's round
// (the replay read Postgres ahead of the stream) is dropped: the round's
// message has that text. Deltas of the new round still come through.
func TestWatchDropsTextOfARoundItsReplayPassed(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	w := e.watch(t, e.hub, tr.session, 2)
	e.settle(t, tr, "3:tool_call", w)
	outs := e.store(t, tr, 2)
	e.pub.Publish(context.Background(), outs[1]) // 5 first: the watcher replays 4 and 5
	// A delta of the round after 3, delivered late.
	late := fmt.Sprintf(`{"session":%q,"turn":%q,"type":"text","text":"old","text_after":3,"text_end":3}`, tr.session, tr.fence.Turn)
	must(t, e.rdb.Publish(context.Background(), e.names.SessionChannel(tr.session), late).Err())
	e.text(tr, "new")
	expect(t, w, "4:tool_call 5:tool_call text(new)")
}

// A watch that starts from a cursor past a round (its client had the
// round's message) shows none of that round's text, even when the running
// text in Redis still names it (the message was committed, not yet
// published); the next round's text comes through.
func TestWatchFromACursorPastTheRoundSkipsItsText(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	e.text(tr, "old")
	outs := e.store(t, tr, 1) // 3, committed, not yet published
	w := e.watch(t, e.hub, tr.session, outs[0].Cursor)
	// A message queued meanwhile (4): the running text still says round 2.
	res, err := e.db.SendMessage(context.Background(), e.human, tr.session, "next", "", store.QueueLimits{})
	must(t, err)
	e.pub.Publish(context.Background(), res.Queued)
	e.pub.Publish(context.Background(), outs...)
	e.text(tr, "new")
	// The queued output and the new round's text may come in either order.
	expectOneOf(t, w, "4:queued text(new)", "text(new) 4:queued")
}

// expectOneOf reads from a watch until what it delivered renders as one
// of wants.
func expectOneOf(t *testing.T, w *tasks.Watch, wants ...string) {
	t.Helper()
	var got []store.Output
	timeout := time.NewTimer(storetest.WaitTimeout)
	defer timeout.Stop()
	for !slices.Contains(wants, render(got)) {
		select {
		case o, ok := <-w.Outputs():
			if !ok {
				t.Fatalf("watch ended (%v) with %q, want one of %q", w.Err(), render(got), wants)
			}
			got = append(got, o)
		case <-timeout.C:
			t.Fatalf("timed out with %q, want one of %q", render(got), wants)
		}
	}
}

// A watch that starts from a cursor of another turn (a message queued
// while a round runs) still gets the running round's text so far.
func TestWatchFromAQueuedCursorGetsTheRunningText(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	e.text(tr, "ab")
	res, err := e.db.SendMessage(context.Background(), e.human, tr.session, "next", "", store.QueueLimits{})
	must(t, err)
	e.pub.Publish(context.Background(), res.Queued)
	w := e.watch(t, e.hub, tr.session, res.Queued.Cursor)
	e.text(tr, "c")
	expect(t, w, "text(abc)")
}
