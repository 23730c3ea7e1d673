package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// fairOrg is one organization of a fairFixture: five projects, a session
// in each, and an engineer of the whole organization who sends.
type fairOrg struct {
	org      store.Organization
	caller   store.Caller
	sessions []string
	// sent counts the sends tried, to go round the sessions.
	sent int
}

// fairFixture holds three organizations, alpha, beta and gamma, in a
// database of its own.
type fairFixture struct {
	db   *store.DB
	orgs []*fairOrg
}

func newFairFixture(t *testing.T) *fairFixture {
	t.Helper()
	ctx := context.Background()
	f := &fairFixture{db: storetest.New(t)}
	sys := store.SystemActor()
	for _, o := range []struct{ key, prefix string }{{"alpha", "AL"}, {"beta", "BE"}, {"gamma", "GA"}} {
		org, err := f.db.CreateOrganization(ctx, o.key, strings.ToUpper(o.key[:1])+o.key[1:], sys)
		if err != nil {
			t.Fatal(err)
		}
		subject := "eng@" + o.key + ".example.com"
		caller := store.HumanCaller(&store.Principal{Subject: subject, Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: subject, Role: store.RoleEngineer,
				Scope: store.Scope{Kind: store.ScopeOrganization, OrganizationID: org.ID}}}})
		fo := &fairOrg{org: org, caller: caller}
		for i := range 5 {
			key := fmt.Sprintf("%s%d", o.prefix, i)
			if _, err := f.db.CreateProject(ctx, org.ID, key, key, sys); err != nil {
				t.Fatal(err)
			}
			s, err := f.db.CreateSession(ctx, caller, key, "plan")
			if err != nil {
				t.Fatal(err)
			}
			fo.sessions = append(fo.sessions, s.ID)
		}
		f.orgs = append(f.orgs, fo)
	}
	return f
}

// settle sets an organization's scheduling weight and its own cap on queued
// turns (nil: the configured default).
func (f *fairFixture) settle(t *testing.T, o *fairOrg, weight int, maxQueued *int) {
	t.Helper()
	if _, err := f.db.Pool().Exec(context.Background(), `UPDATE organizations
		SET scheduling_weight = $2, max_queued_turns = $3 WHERE id = $1`, o.org.ID, weight, maxQueued); err != nil {
		t.Fatal(err)
	}
}

// send sends one message in the organization's next session.
func (f *fairFixture) send(o *fairOrg, lim store.QueueLimits) (session string, err error) {
	session = o.sessions[o.sent%len(o.sessions)]
	o.sent++
	_, err = f.db.SendMessage(context.Background(), o.caller, session, "hello", "", lim)
	return session, err
}

// accept sends n messages that must all be accepted.
func (f *fairFixture) accept(t *testing.T, o *fairOrg, n int, lim store.QueueLimits) {
	t.Helper()
	for i := range n {
		if _, err := f.send(o, lim); err != nil {
			t.Fatalf("%s: send %d of %d: %v", o.org.Key, i+1, n, err)
		}
	}
}

// refuse sends one message that must be refused with want, and checks that
// the refused send wrote nothing.
func (f *fairFixture) refuse(t *testing.T, o *fairOrg, lim store.QueueLimits, want string) {
	t.Helper()
	session := o.sessions[o.sent%len(o.sessions)]
	before := sessionWrites(t, f.db, session)
	if _, err := f.send(o, lim); !store.IsCode(err, store.CodeExhausted) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: send: %v; want %s: %q", o.org.Key, err, store.CodeExhausted, want)
	}
	if after := sessionWrites(t, f.db, session); after != before {
		t.Fatalf("%s: a refused send changed its session: %s, before %s", o.org.Key, after, before)
	}
}

// assertOrgCounts checks each organization's counter against a count of
// its queued turns.
func (f *fairFixture) assertOrgCounts(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, o := range f.orgs {
		var truth int64
		if err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_turns t JOIN projects p ON p.id = t.project_id
			WHERE p.organization_id = $1 AND t.status = 'queued'`, o.org.ID).Scan(&truth); err != nil {
			t.Fatal(err)
		}
		got, err := f.db.QueuedTurnsInOrganization(ctx, o.org.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got != truth {
			t.Errorf("%s: the counter says %d queued turns, the turns %d", o.org.Key, got, truth)
		}
	}
}

// sessionWrites reads back what a send writes in a session: its messages,
// turns, outputs and events, and the session row's counters.
func sessionWrites(t *testing.T, db *store.DB, session string) string {
	t.Helper()
	var messages, turns, outputs, events, seq, turn, cursor int64
	if err := db.Pool().QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM planner_messages WHERE session_id = $1),
		(SELECT count(*) FROM planner_turns WHERE session_id = $1),
		(SELECT count(*) FROM planner_outputs WHERE session_id = $1),
		(SELECT count(*) FROM events WHERE entity_id = $1::text AND type = 'planner.message'),
		s.next_seq, s.next_turn, s.next_cursor
		FROM planner_sessions s WHERE s.id = $1`, session).Scan(&messages, &turns, &outputs, &events, &seq, &turn, &cursor); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d messages, %d turns, %d outputs, %d events, next seq %d, turn %d, cursor %d",
		messages, turns, outputs, events, seq, turn, cursor)
}

// shareRefusal is the refusal of a send whose organization has its share
// of the full queue.
func shareRefusal(total int, org string, queued int, share string, weight, weights int) string {
	return fmt.Sprintf("the planner queue is full (%d queued turns, server.max_queued_turns); try again shortly "+
		"(organization %s already has %d queued turns, at least its share of %s: scheduling weight %d of %d)",
		total, org, queued, share, weight, weights)
}

// TestQueueAdmissionShares: once alpha, across five projects each under the
// per-project cap, fills the pool, another organization's sends are
// admitted up to its share by weight (20 × weight / Σ weight of the
// organizations with queued turns and the sender's) while alpha's further
// sends are refused; a refused send writes nothing.
func TestQueueAdmissionShares(t *testing.T) {
	t.Parallel()
	lim := store.QueueLimits{Total: 20, PerProject: 5, PerOrganization: 100}
	type step struct {
		org      int    // 0 alpha, 1 beta, 2 gamma
		accepted int    // sends that are admitted
		refused  string // the refusal of the next send
	}
	tests := []struct {
		name    string
		weights [3]int
		steps   []step
	}{
		{"flood of one organization", [3]int{1, 1, 1}, []step{
			{0, 20, ""},
			{1, 10, shareRefusal(30, "beta", 10, "10", 1, 2)},
			{0, 0, shareRefusal(30, "alpha", 20, "10", 1, 2)},
		}},
		{"weights 1:3", [3]int{1, 3, 1}, []step{
			{0, 20, ""},
			{1, 15, shareRefusal(35, "beta", 15, "15", 3, 4)},
			{0, 0, shareRefusal(35, "alpha", 20, "5", 1, 4)},
		}},
		{"weights 3:1", [3]int{3, 1, 1}, []step{
			{0, 20, ""},
			{1, 5, shareRefusal(25, "beta", 5, "5", 1, 4)},
			{0, 0, shareRefusal(25, "alpha", 20, "15", 3, 4)},
		}},
		// gamma, with nothing queued, counts in the weights: a third each.
		{"a third organization", [3]int{1, 1, 1}, []step{
			{0, 20, ""},
			{1, 10, ""},
			{2, 7, shareRefusal(37, "gamma", 7, "6.7", 1, 3)},
			{1, 0, shareRefusal(37, "beta", 10, "6.7", 1, 3)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFairFixture(t)
			for i, o := range f.orgs {
				f.settle(t, o, tt.weights[i], nil)
			}
			for _, s := range tt.steps {
				o := f.orgs[s.org]
				f.accept(t, o, s.accepted, lim)
				if s.refused != "" {
					f.refuse(t, o, lim, s.refused)
				}
			}
			f.assertOrgCounts(t)
		})
	}
}

// TestQueueAdmissionOrganizationCap: an organization's queued turns are
// capped by server.max_queued_turns_per_organization unless its own
// max_queued_turns is set, 0 lifting the cap; the refusal names the
// organization and the setting, writes nothing and leaves other
// organizations' sends alone; a turn leaving the queue makes room.
func TestQueueAdmissionOrganizationCap(t *testing.T) {
	t.Parallel()
	lim := store.QueueLimits{Total: 100, PerProject: 100, PerOrganization: 3}
	intp := func(n int) *int { return &n }
	tests := []struct {
		name     string
		own      *int
		accepted int
		want     string // "" for no refusal
	}{
		{"the configured cap", nil, 3, "organization alpha already has 3 queued planner turns (server.max_queued_turns_per_organization); wait for some to finish"},
		{"its own lower cap", intp(2), 2, "organization alpha already has 2 queued planner turns (the organization's max_queued_turns); wait for some to finish"},
		{"its own higher cap", intp(6), 6, "organization alpha already has 6 queued planner turns (the organization's max_queued_turns); wait for some to finish"},
		{"no cap", intp(0), 12, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFairFixture(t)
			alpha, beta := f.orgs[0], f.orgs[1]
			f.settle(t, alpha, 1, tt.own)
			f.accept(t, alpha, tt.accepted, lim)
			if tt.want == "" {
				f.accept(t, beta, 3, lim)
				f.assertOrgCounts(t)
				return
			}
			f.refuse(t, alpha, lim, tt.want)
			f.accept(t, beta, 3, lim)
			f.refuse(t, beta, lim, "organization beta already has 3 queued planner turns (server.max_queued_turns_per_organization)")
			if _, err := f.db.CancelTurns(ctx, alpha.caller, alpha.sessions[0], ""); err != nil {
				t.Fatal(err)
			}
			f.accept(t, alpha, 1, lim)
			f.assertOrgCounts(t)
		})
	}
}
