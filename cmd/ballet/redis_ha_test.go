package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
)

// burstScript answers each burst message with a tool call and then a short
// streamed text, and a "think" message with the start of a slow stream that
// then holds until a file exists at the path formatted in, one nobody
// creates: only a cancel ends it, however slow the machine.
const burstScript = `
answers:
  - match: 'tool_result list_runnable'
    chunk_size: 8
    chunk_latency: 2ms
    content:
      - text: "Nothing is runnable yet; start with the backlog grooming."
  - match: '^burst'
    latency: 10ms
    content:
      - tool_use: {name: list_runnable, input: {}}
  - match: '^think'
    chunk_size: 1
    chunk_latency: 50ms
    hold_after: 3
    hold_until: %q
    content:
      - text: "This takes a long time to think through, one character after another, so that it is cancelled halfway through."
`

// onRedis moves the stack onto another Redis: the planner enqueues,
// publishes and nudges through rdb, and the workers started from now on
// connect with the settings env (BALLET_REDIS_*) instead of the shared Redis.
// It returns the planner's publisher.
func (s *stack) onRedis(rdb redis.UniversalClient, names tasks.Names, env ...string) *tasks.Publisher {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pub := tasks.NewPublisher(rdb, names, log)
	s.planner = tasks.NewPlanner(s.db, tasks.NewQueue(rdb, names, time.Minute), pub,
		store.QueueLimits{Total: 10000, PerProject: 10000}, log)
	var kept []string
	for _, kv := range s.env {
		if !strings.HasPrefix(kv, "BALLET_REDIS_") {
			kept = append(kept, kv)
		}
	}
	s.env = append(append(kept, "BALLET_REDIS_NAMESPACE="+names.Namespace), env...)
	return pub
}

// haStack is a stack on the Redis rc describes (env: the same settings as
// BALLET_REDIS_* for the worker processes), with two workers started on it
// and a hub watching it: the planner's publisher and the hub.
func haStack(t *testing.T, rc tasks.RedisConfig, env ...string) (*stack, *tasks.Publisher, *tasks.Hub) {
	t.Helper()
	rdb, err := tasks.NewRedisClient(rc)
	must(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	names := tasks.Names{Namespace: rc.Namespace}
	s := newStack(t, fmt.Sprintf(burstScript, filepath.Join(t.TempDir(), "never")))
	pub := s.onRedis(rdb, names, env...)
	s.worker()
	s.worker()
	hub := tasks.NewHub(s.db, rdb, names, slog.New(slog.NewTextHandler(io.Discard, nil)))
	must(t, hub.Start(context.Background()))
	t.Cleanup(hub.Stop)
	return s, pub, hub
}

// watched is what one watcher received of a session's stored outputs.
type watched struct {
	mu   sync.Mutex
	seen []store.Output
}

func (w *watched) outputs() []store.Output {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]store.Output(nil), w.seen...)
}

// watch reads a session's outputs through a hub on the test's Redis until
// the test ends, keeping the stored ones (live text deltas have no cursor).
func watch(t *testing.T, hub *tasks.Hub, caller store.Caller, session string) *watched {
	t.Helper()
	w, err := hub.Watch(context.Background(), caller, session, 0)
	must(t, err)
	t.Cleanup(w.Close)
	got := &watched{}
	go func() {
		for o := range w.Outputs() {
			if o.Cursor > 0 {
				got.mu.Lock()
				got.seen = append(got.seen, o)
				got.mu.Unlock()
			}
		}
	}()
	return got
}

// burst is turns sent in several sessions at once, each session's in order.
type burst struct {
	s        *stack
	sessions []string
	watchers []*watched
	mu       sync.Mutex
	turns    map[string][]string // session → accepted turns
	sent     chan struct{}       // one per accepted send
	wg       sync.WaitGroup
}

// startBurst opens sessions sessions, a watcher on each, and sends perSession
// messages in each, a session's next once its last one ended.
func startBurst(t *testing.T, s *stack, hub *tasks.Hub, sessions, perSession int) *burst {
	t.Helper()
	b := &burst{s: s, turns: map[string][]string{}, sent: make(chan struct{}, sessions*perSession)}
	for i := range sessions {
		sess, err := s.db.CreateSession(context.Background(), s.human, "WEB", fmt.Sprintf("burst %d", i))
		must(t, err)
		b.sessions = append(b.sessions, sess.ID)
		b.watchers = append(b.watchers, watch(t, hub, s.human, sess.ID))
	}
	t.Cleanup(b.wg.Wait) // no sender outlives the test, even when it fails
	for _, sess := range b.sessions {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for i := range perSession {
				res, err := s.planner.Send(context.Background(), s.human, sess, fmt.Sprintf("burst message %d", i), "")
				if err != nil {
					t.Errorf("send %d in %s: %v", i, sess, err)
					return
				}
				b.mu.Lock()
				b.turns[sess] = append(b.turns[sess], res.Turn)
				b.mu.Unlock()
				b.sent <- struct{}{}
				if !storetest.Poll(storetest.WaitTimeout, func() bool { return b.ended(sess, res.Turn) }) {
					t.Errorf("turn %s of %s did not end within %s", res.Turn, sess, storetest.WaitTimeout)
					return
				}
			}
		}()
	}
	return b
}

// ended reports whether the turn's status is final in Postgres.
func (b *burst) ended(session, turn string) bool {
	var status string
	err := b.s.db.Pool().QueryRow(context.Background(), `SELECT status FROM planner_turns WHERE id = $1`, turn).Scan(&status)
	return err == nil && status != "queued" && status != "running"
}

// waitSent waits until n sends were accepted.
func (b *burst) waitSent(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-b.sent:
		case <-time.After(storetest.WaitTimeout):
			t.Fatalf("fewer than %d sends accepted within %s", n, storetest.WaitTimeout)
		}
	}
}

// check waits for the burst to end and asserts what a user sees: every
// accepted message's turn ran once through a single done end_turn, its
// tool call stored and run once, and every watcher received every stored
// output of its session, once and in order.
func (b *burst) check(t *testing.T) {
	t.Helper()
	b.wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ctx := context.Background()
	for i, sess := range b.sessions {
		stored, err := b.s.db.Outputs(ctx, sess, 0, 100000)
		must(t, err)
		for _, turn := range b.turns[sess] {
			var mine []store.Output
			for _, o := range stored {
				if o.Turn == turn {
					mine = append(mine, o)
				}
			}
			if countTypes(mine, store.OutputDone) != 1 || mine[len(mine)-1].Text != "end_turn" ||
				countTypes(mine, store.OutputToolResult) != 1 {
				t.Fatalf("turn %s: outputs %v; want one tool result and one done end_turn", turn, mine)
			}
			var calls, assistants int
			must(t, b.s.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_tool_calls WHERE turn_id = $1`, turn).Scan(&calls))
			must(t, b.s.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_messages WHERE turn_id = $1 AND role = 'assistant'`, turn).Scan(&assistants))
			if calls != 1 || assistants != 2 {
				t.Fatalf("turn %s: %d tool calls and %d answers stored, want 1 and 2", turn, calls, assistants)
			}
		}
		last := stored[len(stored)-1].Cursor
		w := b.watchers[i]
		storetest.WaitFor(t, "the watcher of "+sess+" to receive cursor "+fmt.Sprint(last), func() bool {
			seen := w.outputs()
			return len(seen) > 0 && seen[len(seen)-1].Cursor >= last
		})
		seen := w.outputs()
		if len(seen) != len(stored) {
			t.Fatalf("session %s: watcher received %d stored outputs, %d were stored", sess, len(seen), len(stored))
		}
		for j := range seen {
			if seen[j].Cursor != stored[j].Cursor || seen[j].Type != stored[j].Type {
				t.Fatalf("session %s: watcher's output %d is %s #%d, stored %s #%d", sess, j,
					seen[j].Type, seen[j].Cursor, stored[j].Type, stored[j].Cursor)
			}
		}
	}
}

// cancelMidStream sends a long answer and, while it streams, nudges its
// worker on the cancel channel only (no durable flag, which would end the
// turn without the channel): the turn ends cancelled, so the nudge went
// through pub/sub on the Redis of now. The nudge is repeated until the
// turn ends, since one published while the worker resubscribes is lost.
func cancelMidStream(t *testing.T, s *stack, pub *tasks.Publisher) {
	t.Helper()
	ctx := context.Background()
	sess, err := s.db.CreateSession(ctx, s.human, "WEB", "cancel")
	must(t, err)
	s.session = sess.ID
	turn := s.send("think it over")
	storetest.WaitFor(t, "the long answer to stream", func() bool { return s.fake.Active() > 0 })
	b := &burst{s: s}
	storetest.WaitFor(t, "the nudged turn to end", func() bool {
		pub.NudgeCancel(ctx, turn)
		return b.ended(sess.ID, turn)
	})
	outs := s.waitDone(turn)
	if done := outs[len(outs)-1]; done.Text != "cancelled" || countTypes(outs, store.OutputDone) != 1 {
		t.Fatalf("nudged turn: outputs %v; want one done cancelled", outs)
	}
}
