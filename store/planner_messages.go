package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A running turn's write is one UPDATE of its session row and one batch:
// the UPDATE checks the fence, takes the row lock and allocates the message
// seq and output cursors the write needs; the batch then holds every other
// statement, sent in one round trip.

// sessionWrite is what a fenced write takes from its session row.
type sessionWrite struct {
	// Messages and Outputs are how many message seqs and output cursors to take.
	Messages, Outputs int
	// Release ends the lease: the turn ends.
	Release bool
}

// sessionTaken is what sessionWrite gave: the first seq and cursor taken,
// the transaction's time, and the session's organization and project.
type sessionTaken struct {
	Seq, Cursor    int64
	At             time.Time
	OrganizationID string
	ProjectID      string
}

// fencedSessionUpdate is the one write of the session row. A message
// touches the session (updated_at); ending the turn releases the lease;
// outputs alone only move the cursor. None of them moves last_active_at
// (see activeNow), so with the lease unindexed they are HOT updates when
// the new row version fits on its page.
const fencedSessionUpdate = `UPDATE planner_sessions s SET next_seq = s.next_seq + $3, next_cursor = s.next_cursor + $4,
	updated_at = CASE WHEN $3 > 0 THEN now() ELSE s.updated_at END,
	lease_owner = CASE WHEN $5 THEN NULL ELSE s.lease_owner END,
	lease_expires_at = CASE WHEN $5 THEN NULL ELSE s.lease_expires_at END
	FROM projects p WHERE s.id = $1 AND s.lease_token = $2 AND s.lease_owner IS NOT NULL AND p.id = s.project_id
	RETURNING s.next_seq - $3, s.next_cursor - $4, now(), p.organization_id, p.id`

// writeSession checks f and takes what w asks for, holding the session row
// until the transaction ends; ErrLeaseLost when f no longer holds the lease.
func writeSession(ctx context.Context, tx pgx.Tx, f Fence, w sessionWrite) (sessionTaken, error) {
	s, err := scanSessionTaken(tx.QueryRow(ctx, fencedSessionUpdate, f.Session, f.Token, w.Messages, w.Outputs, w.Release))
	if err == pgx.ErrNoRows {
		return sessionTaken{}, ErrLeaseLost
	}
	return s, err
}

func scanSessionTaken(row pgx.Row) (sessionTaken, error) {
	var s sessionTaken
	err := row.Scan(&s.Seq, &s.Cursor, &s.At, &s.OrganizationID, &s.ProjectID)
	return s, err
}

// queueOutputs queues the insert of outs, numbered from cursor, and returns
// them as stored.
func queueOutputs(b *pgx.Batch, sessionID string, cursor int64, at time.Time, outs []Output) ([]Output, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	outs = storedOutputs(sessionID, cursor, at, outs)
	args, err := outputRows(sessionID, at, outs)
	if err != nil {
		return nil, err
	}
	b.Queue(`INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
		SELECT $1, o.cursor, o.turn_id, o.type, o.data, $2
		FROM unnest($3::bigint[], $4::uuid[], $5::text[], $6::jsonb[]) AS o(cursor, turn_id, type, data)`, args...)
	return outs, nil
}

// storedOutputs numbers outs from cursor, as stored at at in the session.
func storedOutputs(sessionID string, cursor int64, at time.Time, outs []Output) []Output {
	for i := range outs {
		outs[i].Session = sessionID
		outs[i].Cursor = cursor + int64(i)
		outs[i].CreatedAt = at
	}
	return outs
}

// storedData is what the data column of o's row holds: o without what is
// kept in columns of its own.
func storedData(o Output) Output {
	o.Role, o.Content, o.CreatedAt = "", nil, time.Time{}
	return o
}

// outputRows are the arguments $1 to $6 of an insert of stored outputs
// from unnest: session, time, then cursors, turns, types and data.
func outputRows(sessionID string, at time.Time, outs []Output) ([]any, error) {
	cursors := make([]int64, len(outs))
	turns := make([]string, len(outs))
	types := make([]string, len(outs))
	data := make([]json.RawMessage, len(outs))
	for i, o := range outs {
		j, err := json.Marshal(storedData(o))
		if err != nil {
			return nil, fmt.Errorf("append outputs: %w", err)
		}
		cursors[i], turns[i], types[i], data[i] = o.Cursor, o.Turn, o.Type, j
	}
	return []any{sessionID, at, cursors, turns, types, data}, nil
}

// queueMessage queues the insert of m, taken with seq at, and its
// planner.message event; an assistant message counts a round unless
// countRound is false (the caller counts it).
func queueMessage(b *pgx.Batch, f Fence, s sessionTaken, m Message, countRound bool) Message {
	m, args := messageRow(f, s, m)
	b.Queue(`INSERT INTO planner_messages (session_id, seq, role, content, author, stop_reason, usage, turn_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, args...)
	if countRound && m.Role == "assistant" {
		b.Queue(`UPDATE planner_turns SET rounds = rounds + 1 WHERE id = $1`, f.Turn)
	}
	queueMessageEvent(b, f, s, m)
	return m
}

// messageRow is m as stored with seq and time s, and the columns of its
// row: session, seq, role, content, author, stop reason, usage, turn and
// time.
func messageRow(f Fence, s sessionTaken, m Message) (Message, []any) {
	var author, stop *string
	if m.Author != "" {
		author = &m.Author
	}
	if m.StopReason != "" {
		stop = &m.StopReason
	}
	m.Seq, m.Turn, m.CreatedAt = s.Seq, f.Turn, s.At
	return m, []any{f.Session, m.Seq, m.Role, m.Content, author, stop, m.Usage, f.Turn, s.At}
}

// queueMessageEvent queues the planner.message event of the stored m.
func queueMessageEvent(b *pgx.Batch, f Fence, s sessionTaken, m Message) {
	b.Queue(eventInsert, eventArgs(Event{OrganizationID: s.OrganizationID, ProjectID: s.ProjectID, Type: "planner.message",
		EntityType: "planner_session", EntityID: f.Session, Actor: PlannerActor(f.Session, f.Human),
		Payload: MustJSON(map[string]any{"seq": m.Seq, "role": m.Role, "turn": f.Turn})})...)
}

// AppendOutputs stores outputs of a running turn.
func (db *DB) AppendOutputs(ctx context.Context, f Fence, outs ...Output) ([]Output, error) {
	var stored []Output
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		s, err := writeSession(ctx, tx, f, sessionWrite{Outputs: len(outs)})
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		if stored, err = queueOutputs(b, f.Session, s.Cursor, s.At, outs); err != nil || b.Len() == 0 {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("store: append outputs: %w", err)
	}
	return stored, nil
}

// AppendMessage stores a message of a running turn (the model's answer, or
// the tool results), its planner.message event and its outputs: a message
// output, then one per extra output given (e.g. tool_call). An assistant
// message counts a round.
func (db *DB) AppendMessage(ctx context.Context, f Fence, m Message, extra ...Output) (Message, []Output, error) {
	var outs []Output
	err := db.txPipelined(ctx, func(tx pgx.Tx) (err error) {
		m, outs, err = appendMessage(ctx, tx, f, m, extra...)
		return err
	})
	if err != nil {
		return Message{}, nil, fmt.Errorf("store: append message: %w", err)
	}
	return m, outs, nil
}

// appendMessage is AppendMessage in the caller's transaction; it checks
// the fence itself.
func appendMessage(ctx context.Context, tx pgx.Tx, f Fence, m Message, extra ...Output) (Message, []Output, error) {
	outs := append([]Output{{Turn: f.Turn, Type: OutputMessage}}, extra...)
	s, err := writeSession(ctx, tx, f, sessionWrite{Messages: 1, Outputs: len(outs)})
	if err != nil {
		return Message{}, nil, err
	}
	b := &pgx.Batch{}
	m = queueMessage(b, f, s, m, true)
	outs[0].Seq = m.Seq
	if outs, err = queueOutputs(b, f.Session, s.Cursor, s.At, outs); err != nil {
		return Message{}, nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Message{}, nil, err
	}
	outs[0].Role, outs[0].Content = m.Role, m.Content // published with the message, as a read joins them
	return m, outs, nil
}
