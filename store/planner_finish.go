package store

import (
	"context"
	"errors"
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
// released; the session's next queued turn is made ready, and next names it
// when it was dispatched too (direct dispatch), to enqueue after commit.
func (db *DB) finishTurn(ctx context.Context, tx pgx.Tx, t Turn, o TurnOutcome) ([]Output, string, error) {
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
		if _, err := tx.Exec(ctx, `UPDATE planner_sessions SET lease_owner = NULL, lease_expires_at = NULL
			WHERE id = $1`, t.Session); err != nil {
			return nil, "", err
		}
	}
	// The next queued turn is enqueued after commit, unless a turn still
	// runs (it enqueues its successor when it ends). It is marked enqueued
	// here; if the enqueue is lost, the sweeper finds it by its age.
	var next string
	var dispatched bool
	err = tx.QueryRow(ctx, nextTurnEnqueue, t.Session, db.direct).Scan(&next, &dispatched)
	if err != nil && err != pgx.ErrNoRows {
		return nil, "", err
	}
	if !dispatched {
		next = ""
	}
	return outs, next, nil
}

// nextTurnEnqueue marks the session's next queued turn ready, unless a
// turn still runs, and with direct dispatch ($2) dispatched too; it returns
// the turn and whether it is dispatched (then its task is to be enqueued).
const nextTurnEnqueue = `UPDATE planner_turns SET ready_at = COALESCE(ready_at, now()),
			enqueued_at = CASE WHEN $2 THEN now() ELSE enqueued_at END WHERE id = (
			SELECT id FROM planner_turns WHERE session_id = $1 AND status = 'queued' AND finished_at IS NULL ORDER BY position LIMIT 1)
		AND NOT EXISTS (SELECT 1 FROM planner_turns WHERE session_id = $1 AND status = 'running' AND finished_at IS NULL)
		RETURNING id, enqueued_at IS NOT NULL AND $2`

// finishWrite ends running turn $1 with status $2, reason $3 and $4 more
// rounds, and stores its outputs (outputRows: $5 to $10) only if it did: its
// result is the number of turns ended, 1 or 0.
const finishWrite = `WITH t AS (UPDATE planner_turns SET status = $2, done_reason = $3, finished_at = now(),
		rounds = rounds + $4 WHERE id = $1 AND status = 'running' RETURNING 1),
	o AS (INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
		SELECT $5, o.cursor, o.turn_id, o.type, o.data, $6
		FROM unnest($7::bigint[], $8::uuid[], $9::text[], $10::jsonb[]) AS o(cursor, turn_id, type, data)
		WHERE EXISTS (SELECT 1 FROM t))
	SELECT count(*) FROM t`

// finishWriteMessage is finishWrite that also stores the turn's last
// message, seq $11, role $12, content $13, author $14, stop reason $15 and
// usage $16, at the outputs' time.
const finishWriteMessage = `WITH t AS (UPDATE planner_turns SET status = $2, done_reason = $3, finished_at = now(),
		rounds = rounds + $4 WHERE id = $1 AND status = 'running' RETURNING 1),
	o AS (INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
		SELECT $5, o.cursor, o.turn_id, o.type, o.data, $6
		FROM unnest($7::bigint[], $8::uuid[], $9::text[], $10::jsonb[]) AS o(cursor, turn_id, type, data)
		WHERE EXISTS (SELECT 1 FROM t)),
	m AS (INSERT INTO planner_messages (session_id, seq, role, content, author, stop_reason, usage, turn_id, created_at)
		SELECT $5, $11, $12, $13, $14, $15, $16, $1, $6 WHERE EXISTS (SELECT 1 FROM t))
	SELECT count(*) FROM t`

// FinishTurn ends the running turn with its outcome: status done, cancelled
// or failed, the done output's reason, and an error output first when
// o.Err is set. A last message (the model's final answer), when given, is
// stored in the same transaction, before the done.
func (db *DB) FinishTurn(ctx context.Context, f Fence, o TurnOutcome, last *Message) ([]Output, string, error) {
	var outs []Output
	var next string
	err := db.txPipelined(ctx, func(tx pgx.Tx) (err error) {
		outs, next, err = db.finishFenced(ctx, tx, f, o, last)
		return err
	})
	if errors.Is(err, errTurnNotRunning) {
		// The lease's turn is not running: end it the long way, which
		// reads the turn first and never writes a second done.
		err = db.fenced(ctx, f, func(tx pgx.Tx) error {
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
			outs, next, err = db.finishTurn(ctx, tx, t, o)
			outs = append(stored, outs...)
			return err
		})
	}
	if err != nil {
		return nil, "", fmt.Errorf("store: finish turn: %w", err)
	}
	return outs, next, nil
}

// errTurnNotRunning rolls finishFenced back when the lease's turn is not
// running after all.
var errTurnNotRunning = errors.New("store: the lease's turn is not running")

// finishFenced ends the lease's running turn in two round trips: the
// session row's one UPDATE (fence, seq and cursors, the lease released),
// then one batch: the turn's end with its outputs and the last message in
// one statement (finishWrite), the message's event, and the session's next
// turn marked enqueued. errTurnNotRunning, and nothing written, when the
// turn is not running.
func (db *DB) finishFenced(ctx context.Context, tx pgx.Tx, f Fence, o TurnOutcome, last *Message) ([]Output, string, error) {
	var outs []Output
	w := sessionWrite{Release: true}
	rounds := 0
	if last != nil {
		w.Messages = 1
		outs = append(outs, Output{Turn: f.Turn, Type: OutputMessage})
		if last.Role == "assistant" {
			rounds = 1
		}
	}
	if o.Err != "" {
		outs = append(outs, Output{Turn: f.Turn, Type: OutputError, Text: o.Err})
	}
	outs = append(outs, Output{Turn: f.Turn, Type: OutputDone, Text: o.Reason})
	w.Outputs = len(outs)
	s, err := writeSession(ctx, tx, f, w)
	if err != nil {
		return nil, "", err
	}
	b := &pgx.Batch{}
	var m Message
	var msgArgs []any
	if last != nil {
		m, msgArgs = messageRow(f, s, *last)
		outs[0].Seq = m.Seq
	}
	outs = storedOutputs(f.Session, s.Cursor, s.At, outs)
	rows, err := outputRows(f.Session, s.At, outs)
	if err != nil {
		return nil, "", err
	}
	write, args := finishWrite, append([]any{f.Turn, string(o.Status), o.Reason, rounds}, rows...)
	if last != nil {
		write, args = finishWriteMessage, append(args, msgArgs[1:7]...) // seq to usage
	}
	b.Queue(write, args...).QueryRow(func(row pgx.Row) error {
		var ended int
		if err := row.Scan(&ended); err != nil {
			return err
		}
		if ended != 1 {
			return errTurnNotRunning
		}
		return nil
	})
	if last != nil {
		queueMessageEvent(b, f, s, m)
	}
	var next string
	b.Queue(nextTurnEnqueue, f.Session, db.direct).QueryRow(func(row pgx.Row) error {
		var dispatched bool
		if err := row.Scan(&next, &dispatched); err != nil && err != pgx.ErrNoRows {
			return err
		}
		if !dispatched {
			next = ""
		}
		return nil
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, "", err
	}
	if last != nil {
		outs[0].Role, outs[0].Content = m.Role, m.Content // published with the message, as a read joins them
	}
	return outs, next, nil
}
