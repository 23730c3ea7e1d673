package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrLeaseLost means another worker took the session's turn lease: the
// caller must stop writing for that turn at once.
var ErrLeaseLost = errors.New("store: session lease lost")

// Fence identifies the holder of a session's turn lease. Every write a
// running turn makes checks it, so a worker that lost its lease (stalled,
// partitioned) cannot write over its successor.
type Fence struct {
	Session string
	Turn    string
	Token   int64
	// Human is the turn's author, whom the planner acts for.
	Human string
}

// ClaimState says what ClaimTurn found.
type ClaimState int

// Claim outcomes.
const (
	// ClaimRun: the caller holds the lease and runs (or resumes) the turn.
	ClaimRun ClaimState = iota
	// ClaimFinished: the turn already ended; nothing to do.
	ClaimFinished
	// ClaimCancelled: the turn was cancelled before it started; Outputs
	// holds its done output and Next the session's next turn to enqueue.
	ClaimCancelled
	// ClaimWaiting: an earlier turn of the session is still open; this one
	// is enqueued again when that one ends.
	ClaimWaiting
	// ClaimBusy: another worker holds a live lease on the session.
	ClaimBusy
	// ClaimFailed: the turn was tried MaxTurnAttempts times without ending;
	// it is ended as failed (Outputs, Next as for ClaimCancelled).
	ClaimFailed
)

// MaxTurnAttempts bounds how often a turn is started or resumed: a turn that
// fails the same way every time ends instead of calling the model forever.
const MaxTurnAttempts = 10

// Claim is the result of ClaimTurn.
type Claim struct {
	State   ClaimState
	Fence   Fence
	Turn    Turn
	Session Session
	// Outputs are stored outputs to publish (started, or done on cancel).
	Outputs []Output
	// Next is the session's next queued turn, when this claim ended one.
	Next string
}

// ClaimTurn takes the session's turn lease for turnID, in arrival order:
// only the oldest open turn of a session may run, and only while no other
// worker holds a live lease. A new lease gets a fresh fencing token.
func (db *DB) ClaimTurn(ctx context.Context, turnID, owner string, lease time.Duration) (Claim, error) {
	var c Claim
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var leaseLive bool
		var token int64
		// A lease is live while it has not run out and its worker still
		// beats: a killed worker's lease is free as soon as its beat expires.
		err := tx.QueryRow(ctx, `SELECT s.lease_owner IS NOT NULL AND s.lease_expires_at > now()
			AND NOT EXISTS (SELECT 1 FROM planner_workers w WHERE w.id = s.lease_owner AND w.expires_at <= now()),
			s.lease_token
			FROM planner_sessions s WHERE s.id = (SELECT session_id FROM planner_turns WHERE id = $1) FOR UPDATE OF s`,
			turnID).Scan(&leaseLive, &token)
		if err != nil {
			return notFound(err, "turn %q", turnID)
		}
		// Read the turn under the session lock: cancel and finish take it too.
		var earlier bool
		t, err := scanTurn(tx.QueryRow(ctx, `SELECT `+turnColumns+`, EXISTS (SELECT 1 FROM planner_turns e
			WHERE e.session_id = t.session_id AND e.position < t.position AND e.status IN ('queued', 'running'))
			FROM planner_turns t WHERE id = $1`, turnID), &earlier)
		if err != nil {
			return err
		}
		c.Turn = t
		if t.FinishedAt != nil {
			c.State = ClaimFinished
			return nil
		}
		switch {
		case earlier:
			c.State = ClaimWaiting
			return nil
		case leaseLive:
			c.State = ClaimBusy
			return nil
		case t.CancelRequested && t.Status == TurnQueued:
			c.State = ClaimCancelled
			c.Outputs, c.Next, err = finishTurn(ctx, tx, t, TurnCancelled, ReasonCancelled, nil)
			return err
		case t.Attempts >= MaxTurnAttempts:
			c.State = ClaimFailed
			c.Outputs, c.Next, err = finishTurn(ctx, tx, t, TurnFailed, ReasonError, &Output{Turn: t.ID, Type: OutputError,
				Text: fmt.Sprintf("The turn was stopped after %d attempts that did not complete. Send a new message to try again.", t.Attempts)})
			return err
		}
		c.State = ClaimRun
		c.Fence = Fence{Session: t.Session, Turn: t.ID, Token: token + 1, Human: t.Author}
		b := &pgx.Batch{}
		b.Queue(`UPDATE planner_sessions SET lease_owner = $2, lease_token = $3,
			lease_expires_at = now() + $4::interval WHERE id = $1`, t.Session, owner, c.Fence.Token, lease.String())
		b.Queue(`UPDATE planner_turns SET status = 'running', attempts = attempts + 1,
			started_at = COALESCE(started_at, now()) WHERE id = $1`, t.ID)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if t.StartedAt == nil {
			c.Outputs, err = appendOutputs(ctx, tx, t.Session, Output{Turn: t.ID, Type: OutputStarted})
			if err != nil {
				return err
			}
		}
		c.Turn.Status, c.Turn.Attempts = TurnRunning, t.Attempts+1
		c.Session, err = scanSession(tx.QueryRow(ctx, sessionSelect+` WHERE s.id = $1`, t.Session))
		return err
	})
	if err != nil {
		return Claim{}, fmt.Errorf("store: claim turn: %w", err)
	}
	return c, nil
}

// fenced runs fn in a transaction that holds the session row, if and only
// if f still holds the lease.
func (db *DB) fenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	return db.Tx(ctx, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		return fn(tx)
	})
}

// RenewLease extends the lease; ErrLeaseLost when another worker took it.
func (db *DB) RenewLease(ctx context.Context, f Fence, lease time.Duration) error {
	tag, err := db.pool.Exec(ctx, `UPDATE planner_sessions SET lease_expires_at = now() + $3::interval
		WHERE id = $1 AND lease_token = $2 AND lease_owner IS NOT NULL`, f.Session, f.Token, lease.String())
	if err != nil {
		return fmt.Errorf("store: renew lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	return nil
}

// HandBack expires the lease at once, so that another worker resumes the
// turn without waiting for it to run out (used on shutdown).
func (db *DB) HandBack(ctx context.Context, f Fence) error {
	_, err := db.pool.Exec(ctx, `UPDATE planner_sessions SET lease_expires_at = now()
		WHERE id = $1 AND lease_token = $2`, f.Session, f.Token)
	if err != nil {
		return fmt.Errorf("store: hand back lease: %w", err)
	}
	return nil
}

// CancelRequested reports whether a cancel of the turn was asked for.
func (db *DB) CancelRequested(ctx context.Context, turnID string) (bool, error) {
	var yes bool
	if err := db.pool.QueryRow(ctx, `SELECT cancel_requested FROM planner_turns WHERE id = $1`, turnID).Scan(&yes); err != nil {
		return false, fmt.Errorf("store: cancel requested: %w", err)
	}
	return yes, nil
}

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

// ClaimToolCall records that the tool call is about to run. fresh is false
// when it was claimed before (a resumed turn): the caller must not run it
// again, and uses the stored result when Done.
func (db *DB) ClaimToolCall(ctx context.Context, f Fence, toolUseID, name string, input json.RawMessage) (ToolCall, bool, error) {
	tc := ToolCall{ToolUseID: toolUseID, Name: name, Input: input}
	fresh := false
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO planner_tool_calls (session_id, tool_use_id, turn_id, name, input)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, f.Session, toolUseID, f.Turn, name, input)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			fresh = true
			return nil
		}
		return tc.scanState(tx.QueryRow(ctx, `SELECT `+toolCallStateColumns+` FROM planner_tool_calls
			WHERE session_id = $1 AND tool_use_id = $2`, f.Session, toolUseID))
	})
	if err != nil {
		return ToolCall{}, false, fmt.Errorf("store: claim tool call: %w", err)
	}
	return tc, fresh, nil
}

// CompleteToolCall stores a tool call's result and its tool_result output.
// A call whose result was stored before, with its effect (RecordToolResult),
// keeps that one: the stored call is returned either way, with the outputs
// this call added.
func (db *DB) CompleteToolCall(ctx context.Context, f Fence, tc ToolCall) (ToolCall, []Output, error) {
	var outs []Output
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		var ok bool
		var err error
		if outs, ok, err = completeToolCall(ctx, tx, f, tc); err != nil || ok {
			return err
		}
		return tc.scanState(tx.QueryRow(ctx, `SELECT `+toolCallStateColumns+` FROM planner_tool_calls
			WHERE session_id = $1 AND tool_use_id = $2`, f.Session, tc.ToolUseID))
	})
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
