package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// retentionLockKey is the Postgres advisory lock a retention run holds, so
// that two runs never overlap whichever processes start them.
const retentionLockKey int64 = 0x62616c6c6574_01 // "ballet", 1

// RetentionLock is the held retention advisory lock, on a connection of
// its own until Release.
type RetentionLock struct {
	conn *pgxpool.Conn
}

// TryRetentionLock takes the retention advisory lock without waiting. It
// returns nil and false while another run holds it.
func (db *DB) TryRetentionLock(ctx context.Context) (*RetentionLock, bool, error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("store: retention lock: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, retentionLockKey).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("store: retention lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return &RetentionLock{conn: conn}, true, nil
}

// Release gives the lock back. A connection that cannot unlock is closed,
// which releases the lock too.
func (l *RetentionLock) Release(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, retentionLockKey); err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}

// ClaimRetentionPeriod records period (the start of a retention.interval)
// as run and reports whether this call claimed it: false when a run of this
// period or a later one was already claimed.
func (db *DB) ClaimRetentionPeriod(ctx context.Context, period time.Time) (bool, error) {
	tag, err := db.pool.Exec(ctx, `
INSERT INTO retention_state AS s (id, last_period) VALUES (true, $1)
ON CONFLICT (id) DO UPDATE SET last_period = EXCLUDED.last_period
WHERE s.last_period < EXCLUDED.last_period`, period)
	if err != nil {
		return false, fmt.Errorf("store: claim retention period: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// PruneOutputs deletes up to batch stored outputs created before cutoff of
// turns that ended before it, and returns how many. Outputs of a turn still
// queued or running are kept whatever their age, and so is the transcript
// (planner_messages): a message output goes, its message stays. The read of
// the turn takes no lock, and the delete locks only the outputs it removes,
// never the session rows that turns update.
func (db *DB) PruneOutputs(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	tag, err := db.pool.Exec(ctx, pruneOutputsSQL, cutoff, batch)
	if err != nil {
		return 0, fmt.Errorf("store: prune outputs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// pruneOutputsSQL deletes one batch of outputs; its select walks
// planner_outputs_created_idx.
const pruneOutputsSQL = `
DELETE FROM planner_outputs WHERE ctid = ANY(ARRAY(
    SELECT o.ctid FROM planner_outputs o
    WHERE o.created_at < $1
      AND EXISTS (SELECT 1 FROM planner_turns t WHERE t.id = o.turn_id AND t.finished_at < $1)
    LIMIT $2))`

// PruneOutputsExplain is the plan of one PruneOutputs batch, for tests that
// check it walks an index.
func (db *DB) PruneOutputsExplain(ctx context.Context, cutoff time.Time, batch int) (string, error) {
	return db.explain(ctx, pruneOutputsSQL, cutoff, batch)
}

// explain returns the text plan of a statement without running it.
func (db *DB) explain(ctx context.Context, sql string, args ...any) (string, error) {
	rows, err := db.pool.Query(ctx, "EXPLAIN "+sql, args...)
	if err != nil {
		return "", fmt.Errorf("store: explain: %w", err)
	}
	defer rows.Close()
	var plan string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", fmt.Errorf("store: explain: %w", err)
		}
		plan += line + "\n"
	}
	return plan, rows.Err()
}

// CheckOutputCursor refuses a replay of a session's outputs from a cursor
// retention has deleted past: outputs after fromCursor are no longer all
// stored, so the replay would have a gap. The answer is
// CodeResyncRequired with the first cursor still stored (first_cursor): the
// client reloads the transcript (the messages are kept) and watches from
// there. fromCursor 0 asks for whatever is stored and is never refused.
func (db *DB) CheckOutputCursor(ctx context.Context, sessionID string, fromCursor int64) error {
	if fromCursor <= 0 {
		return nil
	}
	// Cursors are numbered per session from 1 without gaps, so the first
	// stored one (or, with none left, the next to come) tells whether any
	// after fromCursor is gone.
	var first int64
	err := db.pool.QueryRow(ctx, `SELECT COALESCE(
		(SELECT cursor FROM planner_outputs WHERE session_id = $1 ORDER BY cursor LIMIT 1),
		(SELECT next_cursor FROM planner_sessions WHERE id = $1), 1)`, sessionID).Scan(&first)
	if err != nil {
		return fmt.Errorf("store: check output cursor: %w", err)
	}
	if fromCursor+1 >= first {
		return nil
	}
	e := Errorf(CodeResyncRequired,
		"the outputs after cursor %d were deleted by retention (the first kept is %d): reload the session's messages and watch from cursor %d",
		fromCursor, first, first-1)
	e.Details = map[string]any{"first_cursor": first}
	return e
}
