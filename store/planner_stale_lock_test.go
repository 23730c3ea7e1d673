package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// staleLockFixture is a store opened with cfg on a fresh database, and a
// turn claimed by worker-a whose session row another transaction (the
// stale worker's) then locks and leaves idle.
type staleLockFixture struct {
	db    *store.DB
	claim store.Claim
}

func newStaleLock(t *testing.T, cfg store.Config) *staleLockFixture {
	t.Helper()
	ctx := context.Background()
	cfg.URL = storetest.URL(t)
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4
	}
	cfg.ConnectTimeout = 5 * time.Second
	db, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", sys)
	if err != nil {
		t.Fatal(err)
	}
	project, err := db.CreateProject(ctx, org.ID, "WEB", "Web", sys)
	if err != nil {
		t.Fatal(err)
	}
	human := store.HumanCaller(&store.Principal{Subject: "ann@example.com", Kind: store.ActorHuman,
		Bindings: []store.RoleBinding{{Subject: "ann@example.com", Role: store.RoleEngineer,
			Scope: store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: project.ID}}}})
	s, err := db.CreateSession(ctx, human, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.SendMessage(ctx, human, s.ID, "hello", "", store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	// A lease of a second that worker-a stops renewing: it is paused.
	c, err := db.ClaimTurn(ctx, res.Turn, "worker-a", time.Millisecond)
	if err != nil || c.State != store.ClaimRun {
		t.Fatalf("claim: %v, state %v", err, c.State)
	}
	return &staleLockFixture{db: db, claim: c}
}

// lockIdle locks the session row in a transaction of a pooled connection
// and leaves it idle, as a worker paused inside a write does.
func (f *staleLockFixture) lockIdle(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM planner_sessions WHERE id = $1 FOR UPDATE`, f.claim.Fence.Session); err != nil {
		t.Fatal(err)
	}
}

func TestClaimGivesUpOnALockedSession(t *testing.T) {
	t.Parallel()
	f := newStaleLock(t, store.Config{IdleInTransactionTimeout: 0}) // the lock stays
	f.lockIdle(t)
	// Without a bound the claim would wait for the lock as long as the
	// stale worker sleeps; this deadline is far past the bound.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := f.db.ClaimTurn(ctx, f.claim.Turn.ID, "worker-b", time.Minute)
	if !errors.Is(err, store.ErrSessionLocked) {
		t.Fatalf("claim of a locked session: %v, want ErrSessionLocked", err)
	}
}

func TestAnIdleTransactionReleasesTheSession(t *testing.T) {
	t.Parallel()
	f := newStaleLock(t, store.Config{IdleInTransactionTimeout: 200 * time.Millisecond})
	f.lockIdle(t)
	var got store.Claim
	storetest.WaitFor(t, "worker-b's claim once Postgres ended the idle transaction", func() bool {
		c, err := f.db.ClaimTurn(context.Background(), f.claim.Turn.ID, "worker-b", time.Minute)
		if err != nil && !errors.Is(err, store.ErrSessionLocked) {
			t.Fatal(err)
		}
		got = c
		return err == nil && c.State == store.ClaimRun
	})
	if got.Fence.Token <= f.claim.Fence.Token {
		t.Fatalf("worker-b's fencing token %d, want more than %d", got.Fence.Token, f.claim.Fence.Token)
	}
}

func TestTheHeartbeatBeatsWhileThePoolIsTaken(t *testing.T) {
	t.Parallel()
	f := newStaleLock(t, store.Config{MaxConns: 2})
	ctx := context.Background()
	// Turns hold every pooled connection (waiting on locks, in the field).
	for range 2 {
		c, err := f.db.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Release)
	}
	b := f.db.NewBeater()
	t.Cleanup(b.Close)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.BeatSlots(bctx, "worker-a", 10, 3*time.Second); err != nil {
		t.Fatalf("beat while the pool is taken: %v", err)
	}
	if err := b.StopBeating(bctx, "worker-a"); err != nil {
		t.Fatalf("stop beating while the pool is taken: %v", err)
	}
}
