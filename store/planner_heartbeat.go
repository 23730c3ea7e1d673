package store

import (
	"context"
	"fmt"
	"time"
)

// Beat records that worker id is alive until now + timeout; the leases it
// holds stay live only while its beat does. The row is created on the first
// beat (and again if it was cleaned up while the worker was away). A worker
// that beats with Beat offers no slots to the dispatcher; see BeatSlots.
func (db *DB) Beat(ctx context.Context, id string, timeout time.Duration) error {
	return db.BeatSlots(ctx, id, 0, timeout)
}

// BeatSlots is Beat for a worker that runs up to slots turns at once: the
// dispatcher's capacity is the slots of the workers whose beat holds.
func (db *DB) BeatSlots(ctx context.Context, id string, slots int, timeout time.Duration) error {
	if _, err := db.pool.Exec(ctx, beatSQL, id, timeout.String(), slots); err != nil {
		return fmt.Errorf("store: worker beat: %w", err)
	}
	return nil
}

const (
	beatSQL = `INSERT INTO planner_workers (id, expires_at, slots) VALUES ($1, now() + $2::interval, $3)
		ON CONFLICT (id) DO UPDATE SET beat_at = now(), expires_at = EXCLUDED.expires_at, slots = EXCLUDED.slots`
	stopBeatSQL = `UPDATE planner_workers SET expires_at = now() WHERE id = $1`
)

// StopBeating expires worker id at once: a stopping worker's leases that it
// still holds are resumed elsewhere without waiting for them to run out.
func (db *DB) StopBeating(ctx context.Context, id string) error {
	if _, err := db.pool.Exec(ctx, stopBeatSQL, id); err != nil {
		return fmt.Errorf("store: stop worker beat: %w", err)
	}
	return nil
}

// ForgetWorkers deletes the rows of workers whose beat expired before
// before and that hold no lease any more. A session holds a lease exactly
// while one of its turns runs (ClaimTurn takes both in one statement; a
// running turn's end releases it), so a worker's leases are found through
// the running turns' index, not an index of leases: that one made every
// claim's session update a non-HOT one.
func (db *DB) ForgetWorkers(ctx context.Context, before time.Time) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM planner_workers w WHERE w.expires_at < $1
		AND NOT EXISTS (SELECT 1 FROM planner_turns t JOIN planner_sessions s ON s.id = t.session_id
			WHERE t.status = 'running' AND t.finished_at IS NULL AND s.lease_owner = w.id)`, before); err != nil {
		return fmt.Errorf("store: forget workers: %w", err)
	}
	return nil
}
