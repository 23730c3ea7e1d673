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
		WHERE t.status = 'running' AND t.finished_at IS NULL AND s.lease_owner IS NOT NULL
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
// that makes it the next (send, finish, cancel) with direct dispatch; the
// fair dispatcher marks nothing and sees to its own dispatches
// (worker/dispatch). So the sweep reads the
// planner_turns_due_heads_idx index of those turns, oldest first, and never
// the backlog behind them.
func (db *DB) TakeDueHeads(ctx context.Context, recheck time.Duration, limit int) ([]TurnRef, error) {
	rows, err := db.pool.Query(ctx, `
		UPDATE planner_turns t SET enqueued_at = now()
		WHERE t.status = 'queued' AND t.finished_at IS NULL AND t.id = ANY (ARRAY(
		      SELECT h.id FROM planner_turns h
		      WHERE h.status = 'queued' AND h.finished_at IS NULL AND h.enqueued_at IS NOT NULL AND h.enqueued_at < now() - $1::interval
		        AND NOT EXISTS (SELECT 1 FROM planner_turns e WHERE e.session_id = h.session_id
		                        AND e.position < h.position AND e.finished_at IS NULL)
		      ORDER BY h.enqueued_at LIMIT $2
		      FOR UPDATE OF h SKIP LOCKED))
		RETURNING t.session_id, t.id, 0::bigint, t.enqueued_at, ''`, recheck.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("store: take due heads: %w", err)
	}
	return collectRefs(rows)
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
