package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// finishTurn ends a turn in the caller's transaction (which holds the session
// row): an optional error output, then exactly one done output; the lease is
// released; next is the session's next queued turn, to enqueue after commit.
func finishTurn(ctx context.Context, tx pgx.Tx, t Turn, status, reason string, errOut *Output) ([]Output, string, error) {
	tag, err := tx.Exec(ctx, `UPDATE planner_turns SET status = $2, done_reason = $3, finished_at = now()
		WHERE id = $1 AND finished_at IS NULL`, t.ID, status, reason)
	if err != nil {
		return nil, "", err
	}
	if tag.RowsAffected() == 0 {
		return nil, "", nil // ended already: never a second done
	}
	var outs []Output
	if errOut != nil {
		outs = append(outs, *errOut)
	}
	outs = append(outs, Output{Turn: t.ID, Type: OutputDone, Text: reason})
	if outs, err = appendOutputs(ctx, tx, t.Session, outs...); err != nil {
		return nil, "", err
	}
	if t.Status == TurnRunning {
		if _, err := tx.Exec(ctx, `UPDATE planner_sessions SET lease_owner = NULL, lease_expires_at = NULL,
			last_active_at = now() WHERE id = $1`, t.Session); err != nil {
			return nil, "", err
		}
	}
	// The next queued turn is enqueued after commit, unless a turn still
	// runs (it enqueues its successor when it ends). It is marked enqueued
	// here; if the enqueue is lost, the sweeper finds it by its age.
	var next string
	err = tx.QueryRow(ctx, `UPDATE planner_turns SET enqueued_at = now() WHERE id = (
			SELECT id FROM planner_turns WHERE session_id = $1 AND status = 'queued' ORDER BY position LIMIT 1)
		AND NOT EXISTS (SELECT 1 FROM planner_turns WHERE session_id = $1 AND status = 'running')
		RETURNING id`, t.Session).Scan(&next)
	if err != nil && err != pgx.ErrNoRows {
		return nil, "", err
	}
	return outs, next, nil
}

// FinishTurn ends the running turn: status done, cancelled or failed; reason
// is the done output's text; errText, when set, is an error output first.
// A last message (the model's final answer), when given, is stored in the
// same transaction, before the done.
func (db *DB) FinishTurn(ctx context.Context, f Fence, status, reason, errText string, last *Message) ([]Output, string, error) {
	var outs []Output
	var next string
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		var stored []Output
		if last != nil {
			var err error
			if _, stored, err = appendMessage(ctx, tx, f, *last); err != nil {
				return err
			}
		}
		t, err := scanTurn(tx.QueryRow(ctx, `SELECT `+turnColumns+` FROM planner_turns WHERE id = $1`, f.Turn))
		if err != nil {
			return err
		}
		var errOut *Output
		if errText != "" {
			errOut = &Output{Turn: f.Turn, Type: OutputError, Text: errText}
		}
		outs, next, err = finishTurn(ctx, tx, t, status, reason, errOut)
		outs = append(stored, outs...)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("store: finish turn: %w", err)
	}
	return outs, next, nil
}

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
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM planner_sessions WHERE id = $1 FOR UPDATE`, s.ID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+turnColumns+`, enqueued_at IS NOT NULL FROM planner_turns
			WHERE session_id = $1 AND status IN ('queued', 'running') AND ($2 = '' OR id::text = $2)
			ORDER BY position DESC`, s.ID, turnID)
		if err != nil {
			return err
		}
		type open struct {
			Turn
			enqueued bool
		}
		turns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
			var o open
			var err error
			o.Turn, err = scanTurn(r, &o.enqueued)
			return o, err
		})
		if err != nil {
			return err
		}
		for _, t := range turns {
			if _, err := tx.Exec(ctx, `UPDATE planner_turns SET cancel_requested = true WHERE id = $1`, t.ID); err != nil {
				return err
			}
			if t.Status == TurnRunning {
				res.Running = append(res.Running, t.ID)
				continue
			}
			outs, next, err := finishTurn(ctx, tx, t.Turn, TurnCancelled, ReasonCancelled, nil)
			if err != nil {
				return err
			}
			res.Outputs = append(res.Outputs, outs...)
			res.Next = next
			if t.enqueued {
				res.Dequeued = append(res.Dequeued, t.ID)
			}
		}
		return nil
	})
	if err != nil {
		return CancelResult{}, fmt.Errorf("store: cancel turns: %w", err)
	}
	return res, nil
}
