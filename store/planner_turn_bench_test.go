package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/internal/cputime"
	"github.com/balletplanner/ballet/store"
)

// turnStep is one store call of a turn, by the name the figures use.
type turnStep struct {
	name string
	run  func(ctx context.Context) error
}

// turnSteps are the writes (and history reads) of one turn that calls a
// tool: send, claim, history, the answer with its tool call, the call's
// claim and result, the results message, history again, and the finish with
// the model's last answer.
func turnSteps(db *store.DB, caller store.Caller, session string, n int) []turnStep {
	var res store.SendResult
	var claim store.Claim
	id := fmt.Sprintf("toolu_%d", n)
	call := store.ToolCall{ToolUseID: id, Name: "list_runnable", Input: json.RawMessage(`{}`), Result: "[]"}
	history := func(ctx context.Context) error {
		_, err := db.LoadHistory(ctx, session, claim.Turn.Position)
		return err
	}
	return append(sendAndClaim(db, caller, session, &res, &claim), []turnStep{
		{"history", history},
		{"answer", func(ctx context.Context) error {
			answer := store.Message{Role: "assistant", Content: []store.Block{{Type: store.BlockToolUse,
				ToolUseID: id, Name: call.Name, Input: call.Input}}, StopReason: "tool_use"}
			_, _, err := db.AppendAnswer(ctx, claim.Fence, answer, nil, store.Output{Turn: claim.Fence.Turn,
				Type: store.OutputToolCall, Tool: call.Name, ToolUseID: id, Input: call.Input})
			return err
		}},
		{"tool claim", func(ctx context.Context) error {
			_, fresh, err := db.ClaimToolCall(ctx, claim.Fence, id, call.Name, call.Input)
			if err == nil && !fresh {
				err = fmt.Errorf("tool call %s claimed before", id)
			}
			return err
		}},
		{"tool result", func(ctx context.Context) error {
			_, _, err := db.CompleteToolCall(ctx, claim.Fence, call)
			return err
		}},
		{"results message", func(ctx context.Context) error {
			_, _, err := db.AppendMessage(ctx, claim.Fence, store.Message{Role: "user", Content: []store.Block{
				{Type: store.BlockToolResult, ToolUseID: id, Text: call.Result}}})
			return err
		}},
		{"history", history},
		{"finish", func(ctx context.Context) error { return finishDone(ctx, db, claim.Fence) }},
	}...)
}

// sendAndClaim are the first two steps of every turn: the human's send
// (into *res) and the worker's claim of its turn (into *claim), which must
// run it.
func sendAndClaim(db *store.DB, caller store.Caller, session string, res *store.SendResult, claim *store.Claim) []turnStep {
	return []turnStep{
		{"send", func(ctx context.Context) (err error) {
			*res, err = db.SendMessage(ctx, caller, session, "what next?", "", store.QueueLimits{})
			return err
		}},
		{"claim", func(ctx context.Context) (err error) {
			*claim, err = db.ClaimTurn(ctx, res.Turn, "bench-worker", time.Minute)
			if err == nil && claim.State != store.ClaimRun {
				err = fmt.Errorf("claim state %v, want run", claim.State)
			}
			return err
		}},
	}
}

// droppedConstraintMigrations are the migrations that dropped constraints a
// turn's session lock made redundant; their Down sections put them back.
var droppedConstraintMigrations = []string{
	"00098_planner_outputs_fks.sql",
	"00099_planner_messages_fks.sql",
	"00100_event_numbers_fks.sql",
}

// restoreDroppedConstraints runs the Down sections of
// droppedConstraintMigrations, newest first, on db: the schema as it was
// before them, for a comparison in the same run.
func restoreDroppedConstraints(tb testing.TB, db *store.DB) {
	tb.Helper()
	restoreConstraints(tb, db, droppedConstraintMigrations...)
}

// restoreConstraints runs the Down sections of the named migrations,
// newest first.
func restoreConstraints(tb testing.TB, db *store.DB, migrations ...string) {
	tb.Helper()
	for i := len(migrations) - 1; i >= 0; i-- {
		name := migrations[i]
		b, err := fs.ReadFile(store.Migrations(), name)
		if err != nil {
			tb.Fatal(err)
		}
		_, down, ok := strings.Cut(string(b), "-- +goose Down")
		if !ok {
			tb.Fatalf("%s: no Down section", name)
		}
		down = strings.NewReplacer("-- +goose StatementBegin", "", "-- +goose StatementEnd", "").Replace(down)
		if _, err := db.Pool().Exec(context.Background(), down); err != nil {
			tb.Fatalf("%s down: %v", name, err)
		}
	}
}

// schemas are the two schemas compared: as migrated, and with the dropped
// constraints restored.
var schemas = []struct {
	name    string
	restore bool
}{{"with-dropped-constraints", true}, {"migrated", false}}

// turnBench runs turns on a database of its own, on one connection.
type turnBench struct {
	tb      testing.TB
	f       *trackerFixture
	db      *store.DB
	counter *roundTrips
	backend int // the connection's server process
	session string
	n       int
	// steps are the store calls of one turn (turnSteps by default).
	steps func(db *store.DB, caller store.Caller, session string, n int) []turnStep
}

// newTurnBench makes a fresh database, with the constraints the named
// migrations dropped restored, and warms it up: its statements prepared,
// its caches filled.
func newTurnBench(tb testing.TB, restore ...string) *turnBench {
	tb.Helper()
	return newStepsBench(tb, turnSteps, restore...)
}

// newStepsBench is newTurnBench for turns made of steps.
func newStepsBench(tb testing.TB, steps func(*store.DB, store.Caller, string, int) []turnStep, restore ...string) *turnBench {
	tb.Helper()
	ctx := context.Background()
	t := &turnBench{tb: tb, f: newTrackerFixture(tb), counter: &roundTrips{}, n: -20, steps: steps}
	restoreConstraints(tb, t.f.db, restore...)
	pc := t.f.db.Pool().Config().Copy()
	pc.ConnConfig.Tracer = t.counter
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	t.db = store.New(pool)
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&t.backend); err != nil {
		tb.Fatal(err)
	}
	for t.n < 0 {
		t.turn()
	}
	t.counter.take()
	return t
}

// turn runs one turn; a session takes 10 turns, then the next one starts.
func (t *turnBench) turn() {
	ctx := context.Background()
	if t.n%10 == 0 {
		s, err := t.db.CreateSession(ctx, t.f.engineer, "WEB", "plan")
		if err != nil {
			t.tb.Fatal(err)
		}
		t.session = s.ID
	}
	for _, st := range t.steps(t.db, t.f.engineer, t.session, t.n) {
		if err := st.run(ctx); err != nil {
			t.tb.Fatalf("turn %d, %s: %v", t.n, st.name, err)
		}
	}
	t.n++
}

// BenchmarkTurnWrites runs whole turns that call one tool (turnSteps), on a
// fresh database per schema: with the dropped constraints restored, then as
// migrated, in the same run. It reports the Postgres server's CPU per turn
// (its process's run time; on this machine only), the test process's,
// statements and round trips. The paired runs put a turn on each of two
// databases in turn, so that the load of a shared machine falls on both
// alike: one with every dropped constraint restored (paired-all) or those
// of one migration (paired-<migration>), and one as migrated.
func BenchmarkTurnWrites(b *testing.B) {
	for _, schema := range schemas {
		b.Run(schema.name, func(b *testing.B) {
			var restore []string
			if schema.restore {
				restore = droppedConstraintMigrations
			}
			newTurnBench(b, restore...).loop(b)
		})
	}
	// Paired: all dropped constraints restored on one side, then each
	// migration's alone, for the gain of each.
	pairs := [][]string{droppedConstraintMigrations}
	for _, m := range droppedConstraintMigrations {
		pairs = append(pairs, []string{m})
	}
	for _, restore := range pairs {
		name := "paired-all"
		if len(restore) == 1 {
			name = "paired-" + strings.TrimSuffix(restore[0], ".sql")
		}
		b.Run(name, func(b *testing.B) { pairedTurns(b, restore) })
	}
}

// pairedTurns runs a turn with the constraints that restore's migrations
// dropped restored, then one as migrated, alternating which goes first, and
// reports each one's time and Postgres CPU per turn.
func pairedTurns(b *testing.B, restore []string) {
	pairedSteps(b, turnSteps, restore)
}

// pairedSteps is pairedTurns for turns made of steps.
func pairedSteps(b *testing.B, steps func(*store.DB, store.Caller, string, int) []turnStep, restore []string) {
	// Which database is made first is drawn for each run: the one made
	// second measured cheaper by up to 14 % with nothing restored
	// (BenchmarkTurnCost's control pair), so several runs cancel that out.
	var before, after *turnBench
	if rand.IntN(2) == 0 {
		before, after = newStepsBench(b, steps, restore...), newStepsBench(b, steps)
	} else {
		after, before = newStepsBench(b, steps), newStepsBench(b, steps, restore...)
	}
	var wall, cpu [2]time.Duration
	run := func(i int, t *turnBench) {
		start, pg := time.Now(), backendCPU(t.backend)
		t.turn()
		wall[i] += time.Since(start)
		cpu[i] += backendCPU(t.backend) - pg
	}
	for n := 0; b.Loop(); n++ {
		if n%2 == 0 {
			run(0, before)
			run(1, after)
		} else {
			run(1, after)
			run(0, before)
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(per(wall[0]), "before-µs/turn")
	b.ReportMetric(per(wall[1]), "after-µs/turn")
	if cpu[0] > 0 {
		b.ReportMetric(per(cpu[0]), "before-pg-cpu-µs/turn")
		b.ReportMetric(per(cpu[1]), "after-pg-cpu-µs/turn")
		b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "after/before-pg-cpu")
	}
}

// backendCPU is the CPU time the Postgres backend pid has run, from
// /proc/<pid>/schedstat; -1 when the server is not on this machine.
func backendCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return -1
	}
	ns, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(ns)
}

// finishDone finishes the turn of fence with the model's answer "done", as
// the worker does after its last round.
func finishDone(ctx context.Context, db *store.DB, fence store.Fence) error {
	last := &store.Message{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "done"}},
		StopReason: store.ReasonEndTurn}
	_, _, err := db.FinishTurn(ctx, fence, store.TurnOutcome{Status: store.TurnDone, Reason: store.ReasonEndTurn}, last)
	return err
}

// loop runs turns for b's loop and reports the Postgres backend's CPU per
// turn, the test process's, and the statements and round trips.
func (t *turnBench) loop(b *testing.B) {
	pgStart, goStart := backendCPU(t.backend), cputime.Process()
	for b.Loop() {
		t.turn()
	}
	pgCPU, goCPU := backendCPU(t.backend)-pgStart, cputime.Process()-goStart
	trips, statements := t.counter.take()
	if pgCPU >= 0 {
		b.ReportMetric(float64(pgCPU.Microseconds())/float64(b.N), "pg-cpu-µs/turn")
	}
	b.ReportMetric(float64(goCPU.Microseconds())/float64(b.N), "go-cpu-µs/turn")
	b.ReportMetric(float64(statements)/float64(b.N), "statements/turn")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/turn")
}
