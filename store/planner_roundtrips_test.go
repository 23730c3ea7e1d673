package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
)

// roundTrips counts what the store sends Postgres: a query outside a batch
// is one round trip, a batch is one however many statements it holds.
// Statements are counted one each, in or out of a batch.
type roundTrips struct {
	mu         sync.Mutex
	trips      int
	statements int
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	c.statements++
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	return ctx
}

func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statements++
}

func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the counts since the last take and starts again.
func (c *roundTrips) take() (trips, statements int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, statements = c.trips, c.statements
	c.trips, c.statements = 0, 0
	return trips, statements
}

// TestPlannerWriteRoundTrips runs a turn's writes, step by step, on one
// connection whose statements are already prepared, and counts the round
// trips and statements of each: every write is BEGIN sent with the
// session row's one UPDATE (or, for a claim, its lock), then one batch,
// then COMMIT.
func TestPlannerWriteRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	counter := &roundTrips{}
	pc := f.db.Pool().Config().Copy()
	pc.ConnConfig.Tracer = counter
	pc.MaxConns = 1 // one connection: its statement cache is warm after the first turn
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := store.New(pool)
	sess, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	type count struct{ trips, statements int }
	want := map[string]count{
		"SendMessage":          {3, 5}, // the permission check reads what the session UPDATE returns
		"ClaimTurn":            {3, 8}, // with the turn's history, and its lock timeout (in the first batch)
		"AppendAnswer":         {3, 7},
		"AppendAnswer+refused": {3, 8},
		"ClaimToolCall":        {2, 5},
		"CompleteToolCall":     {3, 6},
		"LoadHistory":          {1, 2},
		"RenewLease":           {1, 1},
		"Beat":                 {1, 1},
		"AppendMessage":        {3, 6},
		"AppendOutputs":        {3, 4},
		"FinishTurn":           {3, 5},
		"FinishTurn+message":   {3, 6},
	}
	for round := range 2 {
		got := map[string]count{}
		step := func(name string, fn func() error) {
			t.Helper()
			counter.take()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			trips, statements := counter.take()
			got[name] = count{trips, statements}
		}
		// Two turns: one that calls a tool and ends without a last message,
		// one that ends with the model's answer.
		for i, last := range []bool{false, true} {
			var res store.SendResult
			step("SendMessage", func() (err error) {
				res, err = db.SendMessage(ctx, f.engineer, sess.ID, "what next?", "", store.QueueLimits{})
				return err
			})
			var claim store.Claim
			step("ClaimTurn", func() (err error) {
				claim, err = db.ClaimTurn(ctx, res.Turn, "roundtrip-worker", time.Minute)
				return err
			})
			if claim.State != store.ClaimRun {
				t.Fatalf("claim state %v, want run", claim.State)
			}
			if read, err := db.LoadHistory(ctx, sess.ID, claim.Turn.Position); err != nil {
				t.Fatal(err)
			} else if claim.History == nil || !reflect.DeepEqual(*claim.History, read) {
				t.Fatalf("the claim's history %+v, want LoadHistory's %+v", claim.History, read)
			}
			fence := claim.Fence
			if !last {
				id := fmt.Sprintf("toolu_%d_%d", round, i)
				answer := store.Message{Role: "assistant", Content: []store.Block{{Type: store.BlockToolUse,
					ToolUseID: id, Name: "list_runnable", Input: json.RawMessage(`{}`)}}, StopReason: "tool_use"}
				step("AppendAnswer", func() error {
					_, _, err := db.AppendAnswer(ctx, fence, answer, nil,
						store.Output{Turn: fence.Turn, Type: store.OutputToolCall, Tool: "list_runnable", ToolUseID: id})
					return err
				})
				step("ClaimToolCall", func() error {
					_, fresh, err := db.ClaimToolCall(ctx, fence, id, "list_runnable", json.RawMessage(`{}`))
					if err == nil && !fresh {
						err = fmt.Errorf("tool call %s claimed before", id)
					}
					return err
				})
				step("CompleteToolCall", func() error {
					_, _, err := db.CompleteToolCall(ctx, fence, store.ToolCall{ToolUseID: id, Name: "list_runnable", Result: "[]"})
					return err
				})
				step("LoadHistory", func() error {
					_, err := db.LoadHistory(ctx, sess.ID, claim.Turn.Position)
					return err
				})
				step("RenewLease", func() error { return db.RenewLease(ctx, fence, time.Minute) })
				step("Beat", func() error { return db.Beat(ctx, "roundtrip-worker", time.Minute) })
				refused := store.ToolCall{ToolUseID: id + "_big", Name: "list_runnable", Input: json.RawMessage(`{}`),
					Result: "input too large", IsError: true}
				step("AppendAnswer+refused", func() error {
					_, _, err := db.AppendAnswer(ctx, fence, store.Message{Role: "assistant", Content: []store.Block{{
						Type: store.BlockToolUse, ToolUseID: refused.ToolUseID, Name: refused.Name, Input: refused.Input}},
						StopReason: "tool_use"}, []store.ToolCall{refused})
					return err
				})
				step("AppendMessage", func() error {
					_, _, err := db.AppendMessage(ctx, fence, store.Message{Role: "user", Content: []store.Block{
						{Type: store.BlockToolResult, ToolUseID: id, Text: "[]"}}})
					return err
				})
				step("AppendOutputs", func() error {
					_, err := db.AppendOutputs(ctx, fence, store.Output{Turn: fence.Turn, Type: store.OutputCompacted})
					return err
				})
				step("FinishTurn", func() error {
					_, _, err := db.FinishTurn(ctx, fence, store.TurnOutcome{Status: store.TurnDone, Reason: "max_rounds"}, nil)
					return err
				})
				continue
			}
			final := &store.Message{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "done"}}, StopReason: "end_turn"}
			step("FinishTurn+message", func() error {
				_, _, err := db.FinishTurn(ctx, fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, final)
				return err
			})
		}
		if round == 0 {
			continue // the first round prepares the statements
		}
		var report []string
		for name, w := range want {
			if g := got[name]; g != w {
				report = append(report, fmt.Sprintf("%s: %d round trips, %d statements; want %d, %d",
					name, g.trips, g.statements, w.trips, w.statements))
			}
		}
		if len(report) > 0 {
			t.Fatalf("round trips per step:\n%s\n(all: %+v)", strings.Join(report, "\n"), got)
		}
	}
}
