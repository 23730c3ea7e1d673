package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PruneEvents deletes up to batch events that occurred before cutoff, with
// their organization numbers, and raises each organization's horizon (the
// highest number deleted) in the same transaction, so that a replay from
// before it is refused rather than silently short. It returns how many
// events went. The log is append-only to everything else: the trigger of
// migration 00096 lets only this transaction delete.
func (db *DB) PruneEvents(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ballet.retention = 'on'`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, pruneEventsSQL, cutoff, batch).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune events: %w", err)
	}
	return n, nil
}

// pruneEventsSQL deletes one batch; its select walks events_occurred_idx.
const pruneEventsSQL = `
WITH gone AS (
    DELETE FROM events WHERE seq = ANY(ARRAY(
        SELECT seq FROM events WHERE occurred_at < $1 LIMIT $2))
    RETURNING seq
), numbers AS (
    DELETE FROM event_numbers WHERE seq IN (SELECT seq FROM gone)
    RETURNING organization_id, org_seq
), horizons AS (
    INSERT INTO event_horizons AS h (organization_id, pruned_through)
    SELECT organization_id, max(org_seq) FROM numbers GROUP BY organization_id
    ON CONFLICT (organization_id) DO UPDATE SET pruned_through = GREATEST(h.pruned_through, EXCLUDED.pruned_through)
    RETURNING 1
)
SELECT count(*) FROM gone`

// PruneEventsExplain is the plan of one PruneEvents batch, for tests that
// check it walks an index.
func (db *DB) PruneEventsExplain(ctx context.Context, cutoff time.Time, batch int) (string, error) {
	return db.explain(ctx, pruneEventsSQL, cutoff, batch)
}

// CheckEventSeq refuses a replay of an organization's events from a number
// retention has deleted past: events after fromSeq may be gone, so the
// replay could have a gap. The answer is CodeResyncRequired with the
// horizon (pruned_through): the client reloads and subscribes again
// without from_seq.
func (db *DB) CheckEventSeq(ctx context.Context, organizationID string, fromSeq int64) error {
	var horizon int64
	err := db.pool.QueryRow(ctx, `SELECT COALESCE((SELECT pruned_through FROM event_horizons
		WHERE organization_id = $1), 0)`, organizationID).Scan(&horizon)
	if err != nil {
		return fmt.Errorf("store: check event seq: %w", err)
	}
	if fromSeq >= horizon {
		return nil
	}
	e := Errorf(CodeResyncRequired,
		"the events up to seq %d were deleted by retention, so a replay from seq %d would miss some: reload and subscribe without from_seq",
		horizon, fromSeq)
	e.Details = map[string]any{"pruned_through": horizon}
	return e
}
