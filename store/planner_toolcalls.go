package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Then is a step a write runs in its own transaction, after its effect and
// before it commits, so that the two commit together or not at all. The
// planner stores a tool call's result this way: a crash loses both or
// keeps both.
type Then[T any] func(ctx context.Context, tx pgx.Tx, written T) error

func (t Then[T]) run(ctx context.Context, tx pgx.Tx, written T) error {
	if t == nil {
		return nil
	}
	return t(ctx, tx, written)
}

// checkFence locks the session row in tx, if and only if f still holds the
// lease.
func checkFence(ctx context.Context, tx pgx.Tx, f Fence) error {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT true FROM planner_sessions WHERE id = $1 AND lease_token = $2
		AND lease_owner IS NOT NULL FOR UPDATE`, f.Session, f.Token).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrLeaseLost
	}
	return err
}

// AppendAnswer is AppendMessage for a model answer, with the answer's
// refused tool calls (e.g. an input too large to keep) recorded as done
// with their error results in the same transaction, so that they are never
// run; a tool_result output follows the answer's outputs for each. Like
// AppendMessage it is one session UPDATE (the fence, the row lock, the seq
// and every output's cursor) and one batch, refused calls or not.
func (db *DB) AppendAnswer(ctx context.Context, f Fence, m Message, refused []ToolCall, extra ...Output) (Message, []Output, error) {
	outs := make([]Output, 0, 1+len(extra)+len(refused))
	outs = append(append(outs, Output{Turn: f.Turn, Type: OutputMessage}), extra...)
	for _, tc := range refused {
		outs = append(outs, Output{Turn: f.Turn, Type: OutputToolResult, Tool: tc.Name,
			ToolUseID: tc.ToolUseID, Text: tc.Result, IsError: true})
	}
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		s, err := writeSession(ctx, tx, f, sessionWrite{Messages: 1, Outputs: len(outs)})
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		m = queueMessage(b, f, s, m, true)
		outs[0].Seq = m.Seq
		for _, tc := range refused {
			b.Queue(`INSERT INTO planner_tool_calls (session_id, tool_use_id, turn_id, name, input,
				status, result, is_error, finished_at) VALUES ($1, $2, $3, $4, $5, 'done', $6, true, now())
				ON CONFLICT DO NOTHING`, f.Session, tc.ToolUseID, f.Turn, tc.Name, tc.Input, tc.Result)
		}
		if outs, err = queueOutputs(b, f.Session, s.Cursor, s.At, outs); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return Message{}, nil, fmt.Errorf("store: append answer: %w", err)
	}
	outs[0].Role, outs[0].Content = m.Role, m.Content // published with the message, as a read joins them
	return m, outs, nil
}

// RecordToolResult stores a claimed tool call's result and its tool_result
// output in tx, the transaction of the tool's effect, if f still holds the
// lease. It returns the output to publish once tx commits.
func RecordToolResult(ctx context.Context, tx pgx.Tx, f Fence, tc ToolCall) ([]Output, error) {
	if err := checkFence(ctx, tx, f); err != nil {
		return nil, fmt.Errorf("store: record tool result: %w", err)
	}
	outs, _, err := completeToolCall(ctx, tx, f, tc)
	if err != nil {
		return nil, fmt.Errorf("store: record tool result: %w", err)
	}
	return outs, nil
}

// completeToolCall stores the result of a tool call that has none yet and
// its tool_result output. A call that has one already (stored with the
// tool's effect) keeps it: ok is false and no output is added.
func completeToolCall(ctx context.Context, tx pgx.Tx, f Fence, tc ToolCall) (outs []Output, ok bool, err error) {
	tag, err := tx.Exec(ctx, `UPDATE planner_tool_calls SET status = 'done', result = $3, is_error = $4,
		finished_at = now() WHERE session_id = $1 AND tool_use_id = $2 AND status <> 'done'`,
		f.Session, tc.ToolUseID, tc.Result, tc.IsError)
	if err != nil || tag.RowsAffected() == 0 {
		return nil, false, err
	}
	outs, err = appendOutputs(ctx, tx, f.Session, Output{Turn: f.Turn, Type: OutputToolResult, Tool: tc.Name,
		ToolUseID: tc.ToolUseID, Text: tc.Result, IsError: tc.IsError})
	return outs, true, err
}

// HoldBindings locks p's role bindings in tx, the transaction of a write
// that p authorized, and fails with forbidden when one of them was removed
// since p was read. The write then commits before any later removal of
// those bindings, or not at all.
func HoldBindings(ctx context.Context, tx pgx.Tx, p *Principal) error {
	if p == nil || len(p.Bindings) == 0 {
		return nil
	}
	ids := make([]string, len(p.Bindings))
	for i, b := range p.Bindings {
		ids[i] = b.ID
	}
	var held int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM role_bindings
		WHERE subject = $1 AND id::text = ANY($2) FOR SHARE) b`, p.Subject, ids).Scan(&held); err != nil {
		return fmt.Errorf("store: hold bindings: %w", err)
	}
	if held < len(ids) {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf(
			"a role binding of %s was removed while the call ran; nothing was written", p.Subject)}
	}
	return nil
}

// ToolCall is the record that keeps a tool call from running twice.
type ToolCall struct {
	ToolUseID string
	Name      string
	Input     json.RawMessage
	Done      bool
	Result    string
	IsError   bool
}

// toolCallStateColumns are what scanState reads from planner_tool_calls
// into a call whose name and input the caller holds.
const toolCallStateColumns = `status = 'done', COALESCE(result, ''), is_error`

func (tc *ToolCall) scanState(row pgx.Row) error {
	return row.Scan(&tc.Done, &tc.Result, &tc.IsError)
}

// fenceLock is checkFence as a batch statement: it locks the session row if
// and only if the fence holds. When it does not, the batch fails with
// ErrLeaseLost and its transaction rolls back what the statements queued
// after it did.
const fenceLock = `SELECT true FROM planner_sessions WHERE id = $1 AND lease_token = $2
	AND lease_owner IS NOT NULL FOR UPDATE`

func queueFenceLock(b *pgx.Batch, f Fence) {
	b.Queue(fenceLock, f.Session, f.Token).QueryRow(func(row pgx.Row) error {
		var ok bool
		if err := row.Scan(&ok); errors.Is(err, pgx.ErrNoRows) {
			return ErrLeaseLost
		} else if err != nil {
			return err
		}
		return nil
	})
}

// ClaimToolCall records that the tool call is about to run. fresh is false
// when it was claimed before (a resumed turn): the caller must not run it
// again, and uses the stored result when Done. One batch: the fence and the
// session row lock, the claim, and the stored call's state; a lost fence
// rolls the claim back.
func (db *DB) ClaimToolCall(ctx context.Context, f Fence, toolUseID, name string, input json.RawMessage) (ToolCall, bool, error) {
	tc := ToolCall{ToolUseID: toolUseID, Name: name, Input: input}
	fresh := false
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		queueFenceLock(b, f)
		b.Queue(`INSERT INTO planner_tool_calls (session_id, tool_use_id, turn_id, name, input)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, f.Session, toolUseID, f.Turn, name, input).
			Exec(func(tag pgconn.CommandTag) error {
				fresh = tag.RowsAffected() == 1
				return nil
			})
		b.Queue(`SELECT `+toolCallStateColumns+` FROM planner_tool_calls WHERE session_id = $1 AND tool_use_id = $2`,
			f.Session, toolUseID).QueryRow(func(row pgx.Row) error {
			stored := tc
			if err := stored.scanState(row); err != nil {
				return err
			}
			if !fresh { // claimed before: its stored state; else the claim just made
				tc = stored
			}
			return nil
		})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return ToolCall{}, false, fmt.Errorf("store: claim tool call: %w", err)
	}
	return tc, fresh, nil
}

// errToolCallDone rolls back a CompleteToolCall whose call had its result
// stored already.
var errToolCallDone = errors.New("store: tool call done already")

// CompleteToolCall stores a tool call's result and its tool_result output.
// A call whose result was stored before, with its effect (RecordToolResult),
// keeps that one: the stored call is returned either way, with the outputs
// this call added. The session UPDATE checks the fence and takes the
// output's cursor, one batch stores the result and the output and reads the
// stored call; when the call was done already, the transaction rolls back
// and no cursor is used.
func (db *DB) CompleteToolCall(ctx context.Context, f Fence, tc ToolCall) (ToolCall, []Output, error) {
	var outs []Output
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		s, err := writeSession(ctx, tx, f, sessionWrite{Outputs: 1})
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		done := false
		b.Queue(`UPDATE planner_tool_calls SET status = 'done', result = $3, is_error = $4,
			finished_at = now() WHERE session_id = $1 AND tool_use_id = $2 AND status <> 'done'`,
			f.Session, tc.ToolUseID, tc.Result, tc.IsError).Exec(func(tag pgconn.CommandTag) error {
			done = tag.RowsAffected() == 0
			return nil
		})
		if outs, err = queueOutputs(b, f.Session, s.Cursor, s.At, []Output{{Turn: f.Turn, Type: OutputToolResult,
			Tool: tc.Name, ToolUseID: tc.ToolUseID, Text: tc.Result, IsError: tc.IsError}}); err != nil {
			return err
		}
		b.Queue(`SELECT `+toolCallStateColumns+` FROM planner_tool_calls WHERE session_id = $1 AND tool_use_id = $2`,
			f.Session, tc.ToolUseID).QueryRow(func(row pgx.Row) error {
			stored := tc
			if err := stored.scanState(row); err != nil || !done {
				return err
			}
			tc = stored
			return errToolCallDone
		})
		return tx.SendBatch(ctx, b).Close()
	})
	if errors.Is(err, errToolCallDone) {
		// Its result was stored with its effect: nothing written, nothing to publish.
		err, outs = nil, nil
	}
	if err != nil {
		return ToolCall{}, nil, fmt.Errorf("store: complete tool call: %w", err)
	}
	tc.Done = true
	return tc, outs, nil
}

// UsedToolUseIDs returns which of ids the session has already claimed.
func (db *DB) UsedToolUseIDs(ctx context.Context, sessionID string, ids []string) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT tool_use_id FROM planner_tool_calls
		WHERE session_id = $1 AND tool_use_id = ANY($2)`, sessionID, ids)
	if err != nil {
		return nil, fmt.Errorf("store: used tool_use ids: %w", err)
	}
	used, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: used tool_use ids: %w", err)
	}
	return used, nil
}
