package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Events are numbered per organization after they commit (migration
// 00105): an event's insert queues it in event_numbering, and NumberEvents
// numbers what is queued. The numberer of each api and worker process
// (tasks.EventNumberer) calls it in the background; readers that must show
// a caller's own last write with its number (an item's history) call it
// first.

// eventNumberingLock is the advisory lock a numbering transaction holds to
// its commit: one numbering at a time, so that numbers become visible in
// increasing order.
const eventNumberingLock int64 = 0x62616c6c6574_02 // "ballet", 2

// NumberedEvents is what one NumberEvents call numbered.
type NumberedEvents struct {
	// Events is how many events were numbered.
	Events int
	// Latest is each organization's highest number assigned.
	Latest map[string]int64
}

// NumberEvents numbers up to limit queued events, oldest first: each
// organization's in the order of the global log, after its highest number
// so far. It NOTIFYs EventsChannel with each organization's highest new
// number as the transaction commits. A number is visible only once every
// lower number of its organization is.
func (db *DB) NumberEvents(ctx context.Context, limit int) (NumberedEvents, error) {
	out := NumberedEvents{Latest: map[string]int64{}}
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, eventNumberingLock)
		b.Queue(numberEventsSQL, limit).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var org string
				var latest int64
				var n int
				if err := rows.Scan(&org, &latest, &n); err != nil {
					return err
				}
				out.Latest[org] = latest
				out.Events += n
			}
			return rows.Err()
		})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return NumberedEvents{}, fmt.Errorf("store: number events: %w", err)
	}
	return out, nil
}

// numberEventsSQL takes up to $1 queued events (the statement runs after
// the numbering lock is taken, so it sees every numbering committed before
// it), numbers them per organization after the organization's counter, and
// NOTIFYs each organization's highest number. A queued event whose event is
// gone (its organization or project deleted) is dropped.
const numberEventsSQL = `
WITH queued AS (
    DELETE FROM event_numbering WHERE seq = ANY(ARRAY(
        SELECT seq FROM event_numbering ORDER BY seq LIMIT $1))
    RETURNING seq
), ordered AS (
    SELECT e.seq, e.organization_id, e.project_id,
           row_number() OVER (PARTITION BY e.organization_id ORDER BY e.seq) AS rn,
           count(*) OVER (PARTITION BY e.organization_id) AS n
    FROM queued q JOIN events e ON e.seq = q.seq
), counters AS (
    INSERT INTO organization_event_counters AS c (organization_id, last_seq)
    SELECT organization_id, count(*) FROM ordered GROUP BY organization_id
    ON CONFLICT (organization_id) DO UPDATE SET last_seq = c.last_seq + EXCLUDED.last_seq
    RETURNING organization_id, last_seq
), numbered AS (
    INSERT INTO event_numbers (seq, organization_id, org_seq, project_id)
    SELECT o.seq, o.organization_id, c.last_seq - o.n + o.rn, o.project_id
    FROM ordered o JOIN counters c USING (organization_id)
    RETURNING organization_id
)
SELECT c.organization_id::text, c.last_seq, (SELECT count(*) FROM numbered n WHERE n.organization_id = c.organization_id)::int
FROM counters c, LATERAL pg_notify('` + EventsChannel + `', c.organization_id::text || ':' || c.last_seq::text) AS notified`

// EventsToNumber reports whether any committed event waits for its number.
func (db *DB) EventsToNumber(ctx context.Context) (bool, error) {
	var queued bool
	if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_numbering)`).Scan(&queued); err != nil {
		return false, fmt.Errorf("store: events to number: %w", err)
	}
	return queued, nil
}

// NumberQueuedEvents numbers everything queued, batch by batch, and
// reports whether anything was: what a numberer does at each look.
func (db *DB) NumberQueuedEvents(ctx context.Context) (bool, error) {
	queued, err := db.EventsToNumber(ctx)
	if err != nil || !queued {
		return false, err
	}
	return true, db.numberBatches(ctx)
}

// numberQueuedEvents numbers what had committed when it was called, if
// anything is queued: for readers that show numbers of events their caller
// may just have written. The callers of one process share the numberings
// (numberingGate).
func (db *DB) numberQueuedEvents(ctx context.Context) error {
	queued, err := db.EventsToNumber(ctx)
	if err != nil || !queued {
		return err
	}
	return db.numbering.do(ctx, db.numberBatches)
}

// numberBatches calls NumberEvents until a batch comes back short.
func (db *DB) numberBatches(ctx context.Context) error {
	for {
		n, err := db.NumberEvents(ctx, EventNumberBatch)
		if err != nil || n.Events < EventNumberBatch {
			return err
		}
	}
}

// EventNumberBatch is how many events NumberQueuedEvents takes at most in
// one NumberEvents call.
const EventNumberBatch = 5000
