package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TurnOutcome is how a turn ends: its final status, the text of its done
// output, and, when Err is set, an error output stored before the done.
type TurnOutcome struct {
	// Status is TurnDone, TurnCancelled or TurnFailed.
	Status TurnStatus
	// Reason is the done output's text: the model's stop reason, or one of
	// the Reason constants.
	Reason string
	// Err is the text of an error output, when the turn ends with one.
	Err string
}

// finishTurn ends a turn in the caller's transaction (which holds the session
// row): an optional error output, then exactly one done output; the lease is
// released; next is the session's next queued turn, to enqueue after commit.
func finishTurn(ctx context.Context, tx pgx.Tx, t Turn, o TurnOutcome) ([]Output, string, error) {
	tag, err := tx.Exec(ctx, `UPDATE planner_turns SET status = $2, done_reason = $3, finished_at = now()
		WHERE id = $1 AND finished_at IS NULL`, t.ID, string(o.Status), o.Reason)
	if err != nil {
		return nil, "", err
	}
	if tag.RowsAffected() == 0 {
		return nil, "", nil // ended already: never a second done
	}
	var outs []Output
	if o.Err != "" {
		outs = append(outs, Output{Turn: t.ID, Type: OutputError, Text: o.Err})
	}
	outs = append(outs, Output{Turn: t.ID, Type: OutputDone, Text: o.Reason})
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

// FinishTurn ends the running turn with its outcome: status done, cancelled
// or failed, the done output's reason, and an error output first when
// o.Err is set. A last message (the model's final answer), when given, is
// stored in the same transaction, before the done.
func (db *DB) FinishTurn(ctx context.Context, f Fence, o TurnOutcome, last *Message) ([]Output, string, error) {
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
		outs, next, err = finishTurn(ctx, tx, t, o)
		outs = append(stored, outs...)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("store: finish turn: %w", err)
	}
	return outs, next, nil
}
