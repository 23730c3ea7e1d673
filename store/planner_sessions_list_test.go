package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// TestSessionsListOrdersByTheLastMessageSent: the sessions list puts first
// the session a human last sent a message to; the worker's writes of a
// turn (claim, history, finish) leave that order alone, so none of them
// moves the index key the list reads.
func TestSessionsListOrdersByTheLastMessageSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	var ids []string
	for _, title := range []string{"older", "newer"} {
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", title)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	// "older" last active two hours ago, "newer" one hour ago.
	for i, id := range ids {
		if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_sessions SET last_active_at = now() - $2::interval WHERE id = $1`,
			id, []string{"2 hours", "1 hour"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []string {
		t.Helper()
		got, err := f.db.ListSessions(ctx, f.engineer, "WEB", 10)
		if err != nil {
			t.Fatal(err)
		}
		var titles []string
		for _, s := range got {
			titles = append(titles, s.Title)
		}
		return titles
	}
	lastActive := func(id string) time.Time {
		t.Helper()
		var at time.Time
		if err := f.db.Pool().QueryRow(ctx, `SELECT last_active_at FROM planner_sessions WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	if got := list(); len(got) != 2 || got[0] != "newer" {
		t.Fatalf("before any message: %v, want newer first", got)
	}

	// A message to "older" puts it first, at the second it was sent.
	before := time.Now().Truncate(time.Second)
	res, err := f.db.SendMessage(ctx, f.engineer, ids[0], "what next?", "", store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	sent := lastActive(ids[0])
	if sent.Before(before.Add(-time.Second)) || sent.Nanosecond() != 0 {
		t.Fatalf("last_active_at after the send: %v, want the send's second", sent)
	}
	if got := list(); got[0] != "older" {
		t.Fatalf("after a message to older: %v, want older first", got)
	}

	// Its turn runs and ends: the worker's writes do not move it.
	claim, err := f.db.ClaimTurn(ctx, res.Turn, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := finishDone(ctx, f.db, claim.Fence); err != nil {
		t.Fatal(err)
	}
	if at := lastActive(ids[0]); !at.Equal(sent) {
		t.Fatalf("last_active_at after the turn: %v, want %v (the send's)", at, sent)
	}
	if got := list(); got[0] != "older" {
		t.Fatalf("after the turn: %v, want older first", got)
	}
}
