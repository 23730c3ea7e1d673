package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CancelResult is what a cancel did.
type CancelResult struct {
	// Outputs are the done outputs of turns cancelled while queued.
	Outputs []Output
	// Dequeued are cancelled turns that were in the task queue: delete them there.
	Dequeued []string
	// Running are running turns now flagged: nudge their workers.
	Running []string
	// Next is the session's next queued turn to enqueue, if a cancel freed it.
	Next string
	// Traces are the trace contexts of the turns cancelled while queued
	// (by turn id), for the spans that end them in their traces; a turn
	// sent while tracing was off has none.
	Traces map[string]map[string]string
}

// CancelTurns cancels one turn of the session, or every open one when turnID
// is empty (tracker.write). Queued turns end at once with done "cancelled";
// running ones get the durable cancel flag, which their worker obeys.
func (db *DB) CancelTurns(ctx context.Context, caller Caller, sessionID, turnID string) (CancelResult, error) {
	s, err := db.authorizedSession(ctx, caller, sessionID, PermTrackerWrite)
	if err != nil {
		return CancelResult{}, err
	}
	turnID = strings.ToLower(turnID)
	if turnID != "" {
		t, err := db.TurnByID(ctx, turnID)
		if err != nil || t.Session != s.ID {
			return CancelResult{}, Errorf(CodeNotFound, "turn %q not found in session %s", turnID, s.ID)
		}
	}
	var res CancelResult
	err = db.txPipelined(ctx, func(tx pgx.Tx) (err error) {
		res, err = db.cancelOpen(ctx, tx, s.ID, turnID)
		return err
	})
	if err != nil {
		return CancelResult{}, fmt.Errorf("store: cancel turns: %w", err)
	}
	return res, nil
}

// cancelOpen cancels one open turn of the session, or all of them when
// turnID is empty, in the caller's transaction, which it makes hold the
// session's row lock: queued turns end with done "cancelled", running ones
// get the cancel flag.
func (db *DB) cancelOpen(ctx context.Context, tx pgx.Tx, sessionID, turnID string) (CancelResult, error) {
	var res CancelResult
	if _, err := tx.Exec(ctx, `SELECT 1 FROM planner_sessions WHERE id = $1 FOR UPDATE`, sessionID); err != nil {
		return res, err
	}
	// A ready turn may have a task: the dispatcher enqueues without a
	// mark in Postgres.
	rows, err := tx.Query(ctx, `SELECT `+turnColumns+`, ready_at IS NOT NULL, trace_context FROM planner_turns
		WHERE session_id = $1 AND finished_at IS NULL AND ($2 = '' OR id::text = $2)
		ORDER BY position DESC`, sessionID, turnID)
	if err != nil {
		return res, err
	}
	type open struct {
		Turn
		enqueued bool
		trace    map[string]string
	}
	turns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
		var o open
		var err error
		o.Turn, err = scanTurn(r, &o.enqueued, &o.trace)
		return o, err
	})
	if err != nil {
		return res, err
	}
	for _, t := range turns {
		if _, err := tx.Exec(ctx, `UPDATE planner_turns SET cancel_requested = true WHERE id = $1`, t.ID); err != nil {
			return res, err
		}
		if t.Status == TurnRunning {
			res.Running = append(res.Running, t.ID)
			continue
		}
		outs, next, err := db.finishTurn(ctx, tx, t.Turn, TurnOutcome{Status: TurnCancelled, Reason: ReasonCancelled})
		if err != nil {
			return res, err
		}
		res.Outputs = append(res.Outputs, outs...)
		res.Next = next
		if len(t.trace) > 0 {
			if res.Traces == nil {
				res.Traces = map[string]map[string]string{}
			}
			res.Traces[t.ID] = t.trace
		}
		if t.enqueued {
			res.Dequeued = append(res.Dequeued, t.ID)
		}
	}
	return res, nil
}

// CancelRequested reports whether a cancel of the turn was asked for.
func (db *DB) CancelRequested(ctx context.Context, turnID string) (bool, error) {
	var yes bool
	if err := db.pool.QueryRow(ctx, `SELECT cancel_requested FROM planner_turns WHERE id = $1`, turnID).Scan(&yes); err != nil {
		return false, fmt.Errorf("store: cancel requested: %w", err)
	}
	return yes, nil
}
