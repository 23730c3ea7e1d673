package store_test

import (
	"context"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestQueuedPositionUnderShares: a queued turn's position counts the turns
// that start before it under the current shares: its session's own, and
// the held-back turns of other humans, projects and organizations that the
// fair order puts first. Direct dispatch counts the session's own only.
func TestQueuedPositionUnderShares(t *testing.T) {
	t.Parallel()
	for _, direct := range []bool{false, true} {
		f := newFairFixture(t)
		f.db.SetDirectDispatch(direct)
		alpha, beta, gamma := f.orgs[0], f.orgs[1], f.orgs[2]
		f.settle(t, gamma, 3, nil)
		send := func(o *fairOrg, session string) int64 {
			t.Helper()
			res, err := f.db.SendMessage(context.Background(), o.caller, session, "hello", "", store.QueueLimits{})
			if err != nil {
				t.Fatal(err)
			}
			return res.Position
		}
		want := func(fair, fifo int64) int64 {
			if direct {
				return fifo
			}
			return fair
		}
		steps := []struct {
			name      string
			org       *fairOrg
			session   string
			fair, own int64
		}{
			// alpha's five projects, one turn each: each project starts
			// one before the next project's first.
			{"alpha's first", alpha, alpha.sessions[0], 0, 0},
			{"alpha's second project", alpha, alpha.sessions[1], 1, 0},
			{"alpha's fifth project", alpha, alpha.sessions[4], 2, 0},
			// Another organization alternates with alpha: one ahead.
			{"beta's first", beta, beta.sessions[0], 1, 0},
			// gamma, weight 3, waits for one turn of each other.
			{"gamma's first", gamma, gamma.sessions[0], 2, 0},
			// Behind its own session's turn, after alpha's other projects'
			// and one of each other organization's.
			{"alpha's second turn in a session", alpha, alpha.sessions[0], 5, 1},
		}
		for _, st := range steps {
			if got := send(st.org, st.session); got != want(st.fair, st.own) {
				t.Fatalf("direct %v, %s: position %d, want %d", direct, st.name, got, want(st.fair, st.own))
			}
		}
		// The stored queued output says the same as the send's answer.
		var stored int64
		if err := f.db.Pool().QueryRow(context.Background(), `SELECT (data->>'position')::bigint FROM planner_outputs
			WHERE type = 'queued' ORDER BY created_at DESC, cursor DESC LIMIT 1`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if w := want(5, 1); stored != w {
			t.Fatalf("direct %v: stored position %d, want %d", direct, stored, w)
		}
	}
}
