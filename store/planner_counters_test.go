package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
)

// TestCounterTriggersMakeTheirFirstRows: the commit-time triggers of
// migration 00102 find their counter rows by UPDATE and make them when
// there is none: an organization's first event is numbered 1 and the next
// ones follow; a project's first queued turn makes its counter shard; the
// turns queued in a project that is deleted leave the total.
func TestCounterTriggersMakeTheirFirstRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)

	org, err := f.db.CreateOrganization(ctx, "initech", "Initech", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	project, err := f.db.CreateProject(ctx, org.ID, "INI", "Initech", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	var numbers []int64
	numberAll(t, f.db)
	rows, err := f.db.Pool().Query(ctx, `SELECT n.org_seq FROM events e JOIN event_numbers n USING (seq)
		WHERE e.organization_id = $1 ORDER BY e.seq`, org.ID)
	if err != nil {
		t.Fatal(err)
	}
	if numbers, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	if len(numbers) < 2 {
		t.Fatalf("a new organization and its project: %d events, want 2 or more", len(numbers))
	}
	for i, n := range numbers {
		if n != int64(i+1) {
			t.Fatalf("the new organization's event numbers: %v, want 1, 2, …", numbers)
		}
	}
	var last int64
	if err := f.db.Pool().QueryRow(ctx, `SELECT last_seq FROM organization_event_counters
		WHERE organization_id = $1`, org.ID).Scan(&last); err != nil || last != int64(len(numbers)) {
		t.Fatalf("the new organization's counter: %d (%v), want %d", last, err, len(numbers))
	}

	// Turns queued in the fixture's project: its first ones make the
	// project's counter shards, the later ones move them.
	for i := range 3 {
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		for range i + 1 {
			if _, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hello", "", store.QueueLimits{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	assertQueueCounts(t, f, "after the sends")
	if inProject, _, err := f.db.QueuedTurns(ctx, f.project.ID); err != nil || inProject != 6 {
		t.Fatalf("queued in the project: %d (%v), want 6", inProject, err)
	}

	// The project goes with its queued turns: its counter rows go by
	// cascade first, then each turn's delete finds none and still moves
	// the total.
	err = f.db.Tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ballet.retention = 'on'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM projects WHERE id = $1`, f.project.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, total, err := f.db.QueuedTurns(ctx, project.ID); err != nil || total != 0 {
		t.Fatalf("queued in all after the project's delete: %d (%v), want 0", total, err)
	}
}
