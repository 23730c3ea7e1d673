package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
)

// statementLog records the statements the store sends, as sent, with their
// arguments.
type statementLog struct {
	mu    sync.Mutex
	op    string // the store call running now
	stmts []tracedStatement
}

type tracedStatement struct {
	op   string
	sql  string
	args []any
}

func (l *statementLog) record(sql string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, tracedStatement{op: l.op, sql: sql, args: args})
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.record(d.SQL, d.Args)
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.record(d.SQL, d.Args)
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// hotTables are the planner tables that grow with every turn.
var hotTables = map[string]bool{"planner_turns": true, "planner_outputs": true, "planner_messages": true}

// TestPlannerHotPathUsesIndexes runs the planner's hot path (send with the
// queue limits, claim, history, answer, finish, output replay by cursor,
// cancel, the sweeper's stale leases and due heads) against sessions with
// tens of thousands of stored turns, messages and outputs, records every
// statement as the store sends it, and EXPLAINs each with its arguments: no
// plan may scan planner_turns, planner_outputs or planner_messages
// sequentially.
func TestPlannerHotPathUsesIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	sess, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	fillPlannerHistory(t, f.db, sess.ID, 2000, 10)

	log := &statementLog{}
	pc := f.db.Pool().Config().Copy()
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := store.New(pool)
	step := func(op string, fn func() error) {
		t.Helper()
		log.mu.Lock()
		log.op = op
		log.mu.Unlock()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	limits := store.QueueLimits{Total: 100000, PerProject: 100000}
	var first, second store.SendResult
	step("SendMessage", func() (err error) {
		if first, err = db.SendMessage(ctx, f.engineer, sess.ID, "what next?", "", limits); err != nil {
			return err
		}
		second, err = db.SendMessage(ctx, f.engineer, sess.ID, "and then?", "", limits)
		return err
	})
	step("Beat", func() error { return db.Beat(ctx, "explain-worker", time.Minute) })
	var claim store.Claim
	step("ClaimTurn", func() (err error) {
		claim, err = db.ClaimTurn(ctx, first.Turn, "explain-worker", time.Minute)
		return err
	})
	if claim.State != store.ClaimRun {
		t.Fatalf("claim state %v, want run", claim.State)
	}
	step("LoadHistory", func() error { _, err := db.LoadHistory(ctx, sess.ID, claim.Turn.Position); return err })
	step("RenewLease", func() error { return db.RenewLease(ctx, claim.Fence, time.Minute) })
	step("CancelRequested", func() error { _, err := db.CancelRequested(ctx, first.Turn); return err })
	step("AppendOutputs", func() error {
		_, err := db.AppendOutputs(ctx, claim.Fence, store.Output{Turn: first.Turn, Type: store.OutputToolCall, Tool: "list_runnable"})
		return err
	})
	step("FinishTurn", func() error {
		_, _, err := db.FinishTurn(ctx, claim.Fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, nil)
		return err
	})
	step("Outputs", func() error { _, err := db.Outputs(ctx, sess.ID, 2, 500); return err })
	step("ListOutputs", func() error { _, err := db.ListOutputs(ctx, f.engineer, sess.ID, 2, 500); return err })
	step("CancelTurns", func() error { _, err := db.CancelTurns(ctx, f.engineer, sess.ID, second.Turn); return err })
	step("StaleLeases", func() error { _, err := db.StaleLeases(ctx, 100); return err })
	step("TakeDueHeads", func() error { _, err := db.TakeDueHeads(ctx, 2*time.Second, 100); return err })

	conn, err := f.db.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The check itself sees a scan that no index serves.
	log.stmts = append(log.stmts, tracedStatement{op: "the check's own probe",
		sql: `SELECT count(*) FROM planner_outputs WHERE data->>'text' = $1`, args: []any{"x"}})
	probe := len(log.stmts) - 1
	explained := map[string]bool{}
	for i, s := range log.stmts {
		verb := strings.ToUpper(strings.Fields(s.sql)[0])
		if explained[s.sql] || !strings.Contains("SELECT INSERT UPDATE DELETE WITH", verb) {
			continue
		}
		explained[s.sql] = true
		var plan []struct{ Plan planNode }
		var raw []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+s.sql, s.args...).Scan(&raw); err != nil {
			t.Fatalf("%s: explain %s: %v", s.op, oneLine(s.sql), err)
		}
		if err := json.Unmarshal(raw, &plan); err != nil {
			t.Fatal(err)
		}
		seqs := plan[0].Plan.seqScans()
		if i == probe {
			if len(seqs) != 1 {
				t.Fatalf("the probe's plan shows sequential scans over %v, want planner_outputs: the check is blind", seqs)
			}
			continue
		}
		for _, seq := range seqs {
			t.Errorf("%s: sequential scan over %s in\n  %s", s.op, seq, oneLine(s.sql))
		}
	}
	if len(explained) < 15 {
		t.Fatalf("explained only %d statements; the tracer missed the hot path", len(explained))
	}
	t.Logf("explained %d statements of the planner's hot path", len(explained))
}

// planNode is a node of an EXPLAIN (FORMAT JSON) plan.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Plans    []planNode `json:"Plans"`
}

// seqScans lists the hot tables the plan scans sequentially.
func (n planNode) seqScans() []string {
	var out []string
	if n.NodeType == "Seq Scan" && hotTables[n.Relation] {
		out = append(out, n.Relation)
	}
	for _, c := range n.Plans {
		out = append(out, c.seqScans()...)
	}
	return out
}

func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// fillPlannerHistory stores sessions×turns finished turns (two messages and
// two outputs each) in new sessions of the project of session like, and
// as many in like itself, then analyzes the tables.
func fillPlannerHistory(t *testing.T, db *store.DB, like string, sessions, turns int) {
	t.Helper()
	ctx := context.Background()
	stmts := []string{
		`INSERT INTO planner_sessions (project_id, title, created_by, next_seq, next_cursor, next_turn)
		 SELECT project_id, 'history', created_by, 2*$2+1, 2*$2+1, $2+1
		 FROM planner_sessions, generate_series(1, $3) WHERE id = $1`,
		`UPDATE planner_sessions SET next_seq = 2*$2+1, next_cursor = 2*$2+1, next_turn = $2+1 WHERE id = $1`,
		`INSERT INTO planner_turns (id, session_id, project_id, position, message_seq, author, status, done_reason,
		     rounds, attempts, enqueued_at, started_at, finished_at)
		 SELECT gen_random_uuid(), s.id, s.project_id, p, 2*p-1, s.created_by, 'done', 'end_turn', 1, 1, now(), now(), now()
		 FROM planner_sessions s, generate_series(1, $2) p
		 WHERE s.id = $1 OR (s.title = 'history' AND s.project_id = (SELECT project_id FROM planner_sessions WHERE id = $1))`,
		`INSERT INTO planner_messages (session_id, seq, role, content, author, turn_id)
		 SELECT t.session_id, 2*t.position - 1 + r, CASE r WHEN 0 THEN 'user' ELSE 'assistant' END,
		        '[{"type":"text","text":"hello"}]', t.author, t.id
		 FROM planner_turns t, generate_series(0, 1) r WHERE t.project_id = (SELECT project_id FROM planner_sessions WHERE id = $1)`,
		`INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data)
		 SELECT t.session_id, 2*t.position - 1 + r, t.id, CASE r WHEN 0 THEN 'started' ELSE 'done' END, '{"text":"end_turn"}'
		 FROM planner_turns t, generate_series(0, 1) r WHERE t.project_id = (SELECT project_id FROM planner_sessions WHERE id = $1)`,
	}
	args := [][]any{{like, turns, sessions}, {like, turns}, {like, turns}, {like}, {like}}
	for i, q := range stmts {
		if _, err := db.Pool().Exec(ctx, q, args[i]...); err != nil {
			t.Fatalf("fill history: %s: %v", oneLine(q), err)
		}
	}
	for _, table := range []string{"planner_sessions", "planner_turns", "planner_messages", "planner_outputs", "planner_tool_calls"} {
		if _, err := db.Pool().Exec(ctx, fmt.Sprintf("ANALYZE %s", table)); err != nil {
			t.Fatal(err)
		}
	}
}
