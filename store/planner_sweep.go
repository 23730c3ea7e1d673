package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Why a running turn's lease is stale (TurnRef.Stale).
const (
	// StaleWorkerLost: the lease had not run out, but its worker stopped
	// beating (killed, lost host, or stopped with the turn still held).
	StaleWorkerLost = "worker_lost"
	// StaleLeaseExpired: the lease ran out or was handed back.
	StaleLeaseExpired = "lease_expired"
)

// TurnRef names a turn and, for a stale lease, the token that expired.
type TurnRef struct {
	Session string
	Turn    string
	Token   int64
	// Enqueued is when the turn was last marked enqueued, if ever.
	Enqueued *time.Time
	// Stale says why a lease is stale (StaleWorkerLost, StaleLeaseExpired);
	// empty for a queued head.
	Stale string
}

// StaleLeases lists running turns that must be resumed elsewhere: their
// worker stopped beating, or their lease ran out or was handed back.
func (db *DB) StaleLeases(ctx context.Context, limit int) ([]TurnRef, error) {
	rows, err := db.pool.Query(ctx, `
		SELECT s.id, t.id, s.lease_token, t.enqueued_at,
		       CASE WHEN s.lease_expires_at <= now() THEN 'lease_expired' ELSE 'worker_lost' END
		FROM planner_turns t
		JOIN planner_sessions s ON s.id = t.session_id
		LEFT JOIN planner_workers w ON w.id = s.lease_owner
		WHERE t.status = 'running' AND s.lease_owner IS NOT NULL
		  AND (s.lease_expires_at <= now() OR w.expires_at <= now())
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: stale leases: %w", err)
	}
	return collectRefs(rows)
}

// TakeDueHeads takes up to limit sessions' next turns that are still
// queued although they were marked enqueued more than recheck ago (on the
// database's clock): their task may never have reached the queue (the
// process died between commit and enqueue), Redis may have lost it, or a
// worker may hold it without ever claiming the turn. Each is marked
// enqueued again as it is taken, in one statement, so that of all the
// workers' sweepers exactly one re-enqueues it, and it is looked at again
// only recheck later.
//
// Only a session's next turn is ever marked enqueued, in the transaction
// that makes it the next (send, finish, cancel), so the sweep reads the
// planner_turns_due_heads_idx index of those turns, oldest first, and never
// the backlog behind them.
func (db *DB) TakeDueHeads(ctx context.Context, recheck time.Duration, limit int) ([]TurnRef, error) {
	rows, err := db.pool.Query(ctx, `
		UPDATE planner_turns t SET enqueued_at = now()
		WHERE t.status = 'queued' AND t.id = ANY (ARRAY(
		      SELECT h.id FROM planner_turns h
		      WHERE h.status = 'queued' AND h.enqueued_at IS NOT NULL AND h.enqueued_at < now() - $1::interval
		        AND NOT EXISTS (SELECT 1 FROM planner_turns e WHERE e.session_id = h.session_id
		                        AND e.position < h.position AND e.status IN ('queued', 'running'))
		      ORDER BY h.enqueued_at LIMIT $2
		      FOR UPDATE OF h SKIP LOCKED))
		RETURNING t.session_id, t.id, 0::bigint, t.enqueued_at, ''`, recheck.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("store: take due heads: %w", err)
	}
	return collectRefs(rows)
}

// Beat records that worker id is alive until now + timeout; the leases it
// holds stay live only while its beat does. The row is created on the first
// beat (and again if it was cleaned up while the worker was away).
func (db *DB) Beat(ctx context.Context, id string, timeout time.Duration) error {
	if _, err := db.pool.Exec(ctx, `INSERT INTO planner_workers (id, expires_at) VALUES ($1, now() + $2::interval)
		ON CONFLICT (id) DO UPDATE SET beat_at = now(), expires_at = EXCLUDED.expires_at`, id, timeout.String()); err != nil {
		return fmt.Errorf("store: worker beat: %w", err)
	}
	return nil
}

// StopBeating expires worker id at once: a stopping worker's leases that it
// still holds are resumed elsewhere without waiting for them to run out.
func (db *DB) StopBeating(ctx context.Context, id string) error {
	if _, err := db.pool.Exec(ctx, `UPDATE planner_workers SET expires_at = now() WHERE id = $1`, id); err != nil {
		return fmt.Errorf("store: stop worker beat: %w", err)
	}
	return nil
}

// ForgetWorkers deletes the rows of workers whose beat expired before
// before and that hold no lease any more.
func (db *DB) ForgetWorkers(ctx context.Context, before time.Time) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM planner_workers w WHERE w.expires_at < $1
		AND NOT EXISTS (SELECT 1 FROM planner_sessions s WHERE s.lease_owner = w.id)`, before); err != nil {
		return fmt.Errorf("store: forget workers: %w", err)
	}
	return nil
}

// scanTurnRef reads a row of a session id, a turn id, a lease token, when
// the turn was enqueued and why its lease is stale: StaleLeases selects
// them, TakeDueHeads returns them.
func scanTurnRef(row pgx.Row) (TurnRef, error) {
	var t TurnRef
	err := row.Scan(&t.Session, &t.Turn, &t.Token, &t.Enqueued, &t.Stale)
	return t, err
}

func collectRefs(rows pgx.Rows) ([]TurnRef, error) {
	refs, err := collect(rows, scanTurnRef)
	if err != nil {
		return nil, fmt.Errorf("store: collect turns: %w", err)
	}
	return refs, nil
}

// History is what the model sees of a session for one turn: the stored
// summary of the turns before SummaryTurn, then every message of the turns
// from SummaryTurn up to the running one, in conversation order (by turn,
// then seq: a message sent while a turn ran has a lower seq than that turn's
// later answers, but comes after them). Turns cancelled before they started
// are left out: the human withdrew them.
type History struct {
	Summary     string
	SummaryTurn int64
	Messages    []Message
	// Cancelled lists the turns among them whose cancel was asked for.
	Cancelled []string
}

// CancelRequested reports whether a cancel of the turn was asked for when
// the history was read.
func (h History) CancelRequested(turn string) bool {
	for _, t := range h.Cancelled {
		if t == turn {
			return true
		}
	}
	return false
}

// LoadHistory reads what the turn at position sees.
func (db *DB) LoadHistory(ctx context.Context, sessionID string, position int64) (History, error) {
	var h History
	var summary *string
	var summaryTurn *int64
	if err := db.pool.QueryRow(ctx, `SELECT summary, summary_turn,
			ARRAY(SELECT id::text FROM planner_turns WHERE session_id = $1 AND cancel_requested AND finished_at IS NULL)
		FROM planner_sessions WHERE id = $1`,
		sessionID).Scan(&summary, &summaryTurn, &h.Cancelled); err != nil {
		return History{}, fmt.Errorf("store: history: %w", notFound(err, "session %q", sessionID))
	}
	if summary != nil {
		h.Summary, h.SummaryTurn = *summary, *summaryTurn
	}
	rows, err := db.pool.Query(ctx, `SELECT `+messageColumns+`
		FROM planner_messages m JOIN planner_turns t ON t.id = m.turn_id
		WHERE m.session_id = $1 AND t.session_id = $1 AND t.position >= $2 AND t.position <= $3
		  AND NOT (t.status = 'cancelled' AND t.started_at IS NULL)
		ORDER BY t.position, m.seq`, sessionID, h.SummaryTurn, position)
	if err != nil {
		return History{}, fmt.Errorf("store: history: %w", err)
	}
	h.Messages, err = collect(rows, scanMessage)
	if err != nil {
		return History{}, fmt.Errorf("store: history: %w", err)
	}
	return h, nil
}

// SaveCompaction stores on the session a summary of every turn before
// position beforeTurn (whose messages end at seq upTo), with its
// planner.compacted event and compacted output.
func (db *DB) SaveCompaction(ctx context.Context, f Fence, summary string, upTo, beforeTurn, estimatedTokens int64) ([]Output, error) {
	var outs []Output
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		var orgID, projectID string
		if err := tx.QueryRow(ctx, `UPDATE planner_sessions s SET summary = $2, summary_up_to = $3, summary_turn = $4,
			summary_tokens = $5, updated_at = now() FROM projects p WHERE s.id = $1 AND p.id = s.project_id
			RETURNING p.organization_id, p.id`, f.Session, summary, upTo, beforeTurn, estimatedTokens).Scan(&orgID, &projectID); err != nil {
			return err
		}
		if _, err := AppendEvent(ctx, tx, Event{OrganizationID: orgID, ProjectID: projectID, Type: "planner.compacted",
			EntityType: "planner_session", EntityID: f.Session, Actor: PlannerActor(f.Session, f.Human),
			Payload: MustJSON(map[string]any{"up_to": upTo, "estimated_tokens": estimatedTokens})}); err != nil {
			return err
		}
		var err error
		outs, err = appendOutputs(ctx, tx, f.Session, Output{Turn: f.Turn, Type: OutputCompacted, Seq: upTo})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: save compaction: %w", err)
	}
	return outs, nil
}
