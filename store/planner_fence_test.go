package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// claimed sends a message to a new session and claims its turn.
func (f *trackerFixture) claimed(t *testing.T, owner string) (store.Claim, store.SendResult) {
	t.Helper()
	ctx := context.Background()
	s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.db.SendMessage(ctx, f.engineer, s.ID, "what next?", "", store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.db.ClaimTurn(ctx, res.Turn, owner, time.Minute)
	if err != nil || c.State != store.ClaimRun {
		t.Fatalf("claim: %v, state %v", err, c.State)
	}
	return c, res
}

// sessionRows renders everything a write of the session could change.
func (f *trackerFixture) sessionRows(t *testing.T, session string) string {
	t.Helper()
	var s string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT concat_ws(' | ',
		(SELECT concat_ws(',', next_seq, next_cursor, lease_owner, lease_token, lease_expires_at, last_active_at, updated_at)
			FROM planner_sessions WHERE id = $1),
		(SELECT string_agg(concat_ws(',', status, rounds, done_reason, finished_at, enqueued_at), ';' ORDER BY position)
			FROM planner_turns WHERE session_id = $1),
		(SELECT string_agg(cursor || ':' || type, ' ' ORDER BY cursor) FROM planner_outputs WHERE session_id = $1),
		(SELECT string_agg(seq || ':' || role, ' ' ORDER BY seq) FROM planner_messages WHERE session_id = $1),
		(SELECT count(*) FROM events WHERE entity_id = $1::text))`, session).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStaleFenceWritesNothing: once another worker took the lease over, or
// the turn ended, every write with the old fence fails with today's error
// and leaves the session's rows as they were.
func TestStaleFenceWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	answer := store.Message{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "late"}}, StopReason: "end_turn"}
	writes := []struct {
		name, err string
		write     func(store.Fence) error
	}{
		{"AppendOutputs", "store: append outputs: store: session lease lost", func(fe store.Fence) error {
			_, err := f.db.AppendOutputs(ctx, fe, store.Output{Turn: fe.Turn, Type: store.OutputCompacted})
			return err
		}},
		{"AppendMessage", "store: append message: store: session lease lost", func(fe store.Fence) error {
			_, _, err := f.db.AppendMessage(ctx, fe, answer, store.Output{Turn: fe.Turn, Type: store.OutputToolCall, Tool: "list_runnable"})
			return err
		}},
		{"FinishTurn", "store: finish turn: store: session lease lost", func(fe store.Fence) error {
			_, _, err := f.db.FinishTurn(ctx, fe, store.TurnOutcome{Status: store.TurnFailed, Reason: store.ReasonError, Err: "boom"}, nil)
			return err
		}},
		{"FinishTurn with a last message", "store: finish turn: store: session lease lost", func(fe store.Fence) error {
			_, _, err := f.db.FinishTurn(ctx, fe, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, &answer)
			return err
		}},
	}
	stale := []struct {
		name  string
		fence func(t *testing.T) (stale store.Fence, session string)
	}{
		{"taken over", func(t *testing.T) (store.Fence, string) {
			c, res := f.claimed(t, "worker-a")
			if err := f.db.HandBack(ctx, c.Fence); err != nil {
				t.Fatal(err)
			}
			next, err := f.db.ClaimTurn(ctx, res.Turn, "worker-b", time.Minute)
			if err != nil || next.State != store.ClaimRun || next.Fence.Token != c.Fence.Token+1 {
				t.Fatalf("take over: %v, %+v", err, next)
			}
			return c.Fence, c.Fence.Session
		}},
		{"turn ended", func(t *testing.T) (store.Fence, string) {
			c, _ := f.claimed(t, "worker-a")
			if _, _, err := f.db.FinishTurn(ctx, c.Fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, nil); err != nil {
				t.Fatal(err)
			}
			return c.Fence, c.Fence.Session
		}},
	}
	for _, s := range stale {
		for _, w := range writes {
			t.Run(s.name+"/"+w.name, func(t *testing.T) {
				fence, session := s.fence(t)
				before := f.sessionRows(t, session)
				err := w.write(fence)
				if !errors.Is(err, store.ErrLeaseLost) || err.Error() != w.err {
					t.Fatalf("stale write: %v, want %q", err, w.err)
				}
				if after := f.sessionRows(t, session); after != before {
					t.Fatalf("a stale write changed the session:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// render writes outputs as they are published, to compare with a replay.
func renderOutputs(outs []store.Output) string {
	var b []string
	for _, o := range outs {
		content, _ := json.Marshal(o.Content)
		b = append(b, fmt.Sprintf("%d:%s seq=%d text=%q tool=%s role=%s content=%s at=%s", o.Cursor, o.Type, o.Seq, o.Text,
			o.Tool, o.Role, content, o.CreatedAt.UTC().Format(time.RFC3339Nano)))
	}
	return strings.Join(b, "\n")
}

// TestFencedWritesStoreWhatTheyReturn: the outputs a write returns (to
// publish) are what a replay from Postgres reads, in cursor order, and the
// turn, its message and the session's lease and next turn are stored.
func TestFencedWritesStoreWhatTheyReturn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	// With direct dispatch the finish names the next turn to enqueue.
	f.db.SetDirectDispatch(true)
	c, first := f.claimed(t, "worker-a")
	fe := c.Fence
	second, err := f.db.SendMessage(ctx, f.engineer, fe.Session, "and then?", "", store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	var published []store.Output
	published = append(published, first.Queued)
	published = append(published, c.Outputs...)
	published = append(published, second.Queued)
	tool := store.Message{Role: "assistant", StopReason: "tool_use", Content: []store.Block{
		{Type: store.BlockToolUse, ToolUseID: "toolu_1", Name: "list_runnable", Input: json.RawMessage(`{}`)}}}
	m, outs, err := f.db.AppendMessage(ctx, fe, tool, store.Output{Turn: fe.Turn, Type: store.OutputToolCall, Tool: "list_runnable", ToolUseID: "toolu_1"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 3 || m.Turn != fe.Turn || m.CreatedAt.IsZero() {
		t.Fatalf("answer stored as %+v, want seq 3 of turn %s", m, fe.Turn)
	}
	published = append(published, outs...)
	outs, err = f.db.AppendOutputs(ctx, fe, store.Output{Turn: fe.Turn, Type: store.OutputToolResult, ToolUseID: "toolu_1", Text: "[]"})
	if err != nil {
		t.Fatal(err)
	}
	published = append(published, outs...)
	final := &store.Message{Role: "assistant", StopReason: "end_turn", Content: []store.Block{{Type: store.BlockText, Text: "all done"}}}
	outs, next, err := f.db.FinishTurn(ctx, fe, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn", Err: "a note"}, final)
	if err != nil {
		t.Fatal(err)
	}
	published = append(published, outs...)
	if next != second.Turn {
		t.Fatalf("next turn %q, want %s", next, second.Turn)
	}
	var types []string
	for i, o := range published {
		types = append(types, o.Type)
		if o.Cursor != int64(i+1) {
			t.Fatalf("cursor of output %d is %d, want %d", i, o.Cursor, i+1)
		}
	}
	if got := strings.Join(types, " "); got != "queued started queued message tool_call tool_result message error done" {
		t.Fatalf("outputs %s", got)
	}
	replay, err := f.db.Outputs(ctx, fe.Session, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := renderOutputs(replay), renderOutputs(published); got != want {
		t.Fatalf("replayed:\n%s\nwant what was returned:\n%s", got, want)
	}
	var row string
	if err := f.db.Pool().QueryRow(ctx, `SELECT concat_ws(',', t.status, t.rounds, t.done_reason,
			s.lease_owner IS NULL AND s.lease_expires_at IS NULL, s.next_seq, s.next_cursor,
			(SELECT enqueued_at IS NOT NULL FROM planner_turns WHERE id = $2),
			(SELECT string_agg(seq || ':' || role || ':' || (created_at = t.finished_at), ' ' ORDER BY seq) FROM planner_messages WHERE turn_id = t.id),
			(SELECT count(*) FROM events WHERE entity_id = s.id::text AND type = 'planner.message'))
		FROM planner_turns t JOIN planner_sessions s ON s.id = t.session_id WHERE t.id = $1`, fe.Turn, second.Turn).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if want := "done,2,end_turn,t,5,10,t,1:user:false 3:assistant:false 4:assistant:true,4"; row != want {
		t.Fatalf("stored %s, want %s", row, want)
	}
}

// TestFinishOfATurnThatEndedAlready: when the lease's turn ended by other
// means, finishing it stores the last message but never a second done.
func TestFinishOfATurnThatEndedAlready(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	c, _ := f.claimed(t, "worker-a")
	if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_turns SET status = 'failed', finished_at = now() WHERE id = $1`, c.Fence.Turn); err != nil {
		t.Fatal(err)
	}
	final := &store.Message{Role: "assistant", StopReason: "end_turn", Content: []store.Block{{Type: store.BlockText, Text: "late"}}}
	outs, next, err := f.db.FinishTurn(ctx, c.Fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, final)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Type != store.OutputMessage || next != "" {
		t.Fatalf("outputs %+v, next %q; want the message output only", outs, next)
	}
	var status, types string
	if err := f.db.Pool().QueryRow(ctx, `SELECT t.status, (SELECT string_agg(type, ' ' ORDER BY cursor)
		FROM planner_outputs WHERE turn_id = t.id) FROM planner_turns t WHERE t.id = $1`, c.Fence.Turn).Scan(&status, &types); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || types != "queued started message" {
		t.Fatalf("turn %s with outputs %q; want failed, with no done added", status, types)
	}
}

// whileSessionLocked runs write while another transaction holds the
// session row and changes what change changes, and commits that
// transaction only once write waits for the row: write must see the change.
func (f *trackerFixture) whileSessionLocked(t *testing.T, session, change string, args []any, write func() error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM planner_sessions WHERE id = $1 FOR UPDATE`, session); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, change, args...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- write() }()
	storetest.WaitFor(t, "the write to wait for the session row", func() bool {
		var n int
		err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return <-done
}

// TestWritesSeeWhatCommittedWhileTheyWaited: a claim that waited for the
// session row reads the turn as the holder left it (a cancel asked for
// meanwhile ends it), and a finish whose lease was taken over meanwhile
// writes nothing.
func TestWritesSeeWhatCommittedWhileTheyWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	t.Run("claim", func(t *testing.T) {
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.db.SendMessage(ctx, f.engineer, s.ID, "what next?", "", store.QueueLimits{})
		if err != nil {
			t.Fatal(err)
		}
		var c store.Claim
		err = f.whileSessionLocked(t, s.ID, `UPDATE planner_turns SET cancel_requested = true WHERE id = $1`, []any{res.Turn},
			func() (err error) {
				c, err = f.db.ClaimTurn(ctx, res.Turn, "worker-a", time.Minute)
				return err
			})
		if err != nil || c.State != store.ClaimCancelled || len(c.Outputs) != 1 || c.Outputs[0].Text != store.ReasonCancelled {
			t.Fatalf("claim: %v, state %v, outputs %+v; want the turn cancelled", err, c.State, c.Outputs)
		}
	})
	t.Run("finish", func(t *testing.T) {
		c, _ := f.claimed(t, "worker-a")
		before := f.sessionRows(t, c.Fence.Session)
		final := &store.Message{Role: "assistant", StopReason: "end_turn", Content: []store.Block{{Type: store.BlockText, Text: "late"}}}
		err := f.whileSessionLocked(t, c.Fence.Session, `UPDATE planner_sessions SET lease_token = lease_token + 1 WHERE id = $1`,
			[]any{c.Fence.Session}, func() error {
				_, _, err := f.db.FinishTurn(ctx, c.Fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, final)
				return err
			})
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("finish after a take-over: %v, want the lease lost", err)
		}
		// Undo the take-over's own change, to compare the rest.
		if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_sessions SET lease_token = lease_token - 1 WHERE id = $1`, c.Fence.Session); err != nil {
			t.Fatal(err)
		}
		if after := f.sessionRows(t, c.Fence.Session); after != before {
			t.Fatalf("a finish after a take-over changed the session:\nbefore %s\nafter  %s", before, after)
		}
	})
}
