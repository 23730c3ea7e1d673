package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AppendOutputs stores outputs of a running turn.
func (db *DB) AppendOutputs(ctx context.Context, f Fence, outs ...Output) ([]Output, error) {
	var stored []Output
	err := db.fenced(ctx, f, func(tx pgx.Tx) (err error) {
		stored, err = appendOutputs(ctx, tx, f.Session, outs...)
		return err
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
	err := db.fenced(ctx, f, func(tx pgx.Tx) (err error) {
		m, outs, err = appendMessage(ctx, tx, f, m, extra...)
		return err
	})
	if err != nil {
		return Message{}, nil, fmt.Errorf("store: append message: %w", err)
	}
	return m, outs, nil
}

// appendMessage is AppendMessage in the caller's fenced transaction.
func appendMessage(ctx context.Context, tx pgx.Tx, f Fence, m Message, extra ...Output) (Message, []Output, error) {
	var orgID, projectID string
	if err := tx.QueryRow(ctx, `UPDATE planner_sessions s SET next_seq = next_seq + 1, last_active_at = now(),
		updated_at = now() FROM projects p WHERE s.id = $1 AND p.id = s.project_id
		RETURNING s.next_seq - 1, p.organization_id, p.id`, f.Session).Scan(&m.Seq, &orgID, &projectID); err != nil {
		return Message{}, nil, err
	}
	var author, stop *string
	if m.Author != "" {
		author = &m.Author
	}
	if m.StopReason != "" {
		stop = &m.StopReason
	}
	m.Turn = f.Turn
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO planner_messages (session_id, seq, role, content, author, stop_reason, usage, turn_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING created_at`, f.Session, m.Seq, m.Role, m.Content,
		author, stop, m.Usage, f.Turn).QueryRow(func(row pgx.Row) error { return row.Scan(&m.CreatedAt) })
	if m.Role == "assistant" {
		b.Queue(`UPDATE planner_turns SET rounds = rounds + 1 WHERE id = $1`, f.Turn)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Message{}, nil, err
	}
	if _, err := AppendEvent(ctx, tx, Event{OrganizationID: orgID, ProjectID: projectID, Type: "planner.message",
		EntityType: "planner_session", EntityID: f.Session, Actor: PlannerActor(f.Session, f.Human),
		Payload: MustJSON(map[string]any{"seq": m.Seq, "role": m.Role, "turn": f.Turn})}); err != nil {
		return Message{}, nil, err
	}
	outs, err := appendOutputs(ctx, tx, f.Session, append([]Output{{Turn: f.Turn, Type: OutputMessage, Seq: m.Seq}}, extra...)...)
	if err != nil {
		return Message{}, nil, err
	}
	outs[0].Role, outs[0].Content = m.Role, m.Content // published with the message, as a read joins them
	return m, outs, nil
}
