package main

import (
	"context"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestRetentionRun: `ballet retention run` deletes what the windows no
// longer keep and says how much, also when this period's scheduled run is
// done and again at once, refuses while another run holds the lock, and
// with every window 0 deletes nothing.
func TestRetentionRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	db := storetest.Open(t, url)
	if _, err := db.CreateOrganization(ctx, "acme", "Acme", store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`ALTER TABLE events DISABLE TRIGGER events_no_update`,
		`UPDATE events SET occurred_at = now() - interval '40 days'`, `ALTER TABLE events ENABLE TRIGGER events_no_update`} {
		if _, err := db.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// This period's scheduled run is done already.
	if ok, err := db.ClaimRetentionPeriod(ctx, time.Now().Truncate(time.Hour).UTC()); err != nil || !ok {
		t.Fatalf("claim this period: %v, %v", ok, err)
	}
	env := []string{"BALLET_DATABASE_URL=" + url}
	runs := []struct {
		name string
		env  []string
		out  string
	}{
		{"old events", nil, "retention run: 0 planner outputs deleted (older than 30d), 0 usage rows rolled up by day (older than 90d), 1 events deleted (older than 30d)\n"},
		{"at once again", nil, "retention run: 0 planner outputs deleted (older than 30d), 0 usage rows rolled up by day (older than 90d), 0 events deleted (older than 30d)\n"},
		{"every window 0", []string{"BALLET_RETENTION_OUTPUTS=0s", "BALLET_RETENTION_USAGE_DETAIL=0s", "BALLET_RETENTION_EVENTS=0s"},
			"retention run: every window is 0 (keep forever): nothing to delete\n"},
	}
	for _, r := range runs { // in order: each sees what the one before left
		out, stderr, code := ballet(t, append(env, r.env...), "retention", "run")
		if code != 0 || out != r.out {
			t.Fatalf("%s: exit %d, out %q, stderr %q; want exit 0, out %q", r.name, code, out, stderr, r.out)
		}
	}
	var n int64
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("events left: %d, %v", n, err)
	}

	lock, ok, err := db.TryRetentionLock(ctx)
	if err != nil || !ok {
		t.Fatalf("take the lock: %v, %v", ok, err)
	}
	defer lock.Release(ctx)
	out, stderr, code := ballet(t, env, "retention", "run")
	if want := "ballet: " + errRetentionBusy.Error() + "\n"; code != 1 || out != "" || stderr != want {
		t.Fatalf("with the lock held: exit %d, out %q, stderr %q; want exit 1 and %q", code, out, stderr, want)
	}
}

// TestRetentionWindow: how a run names each window.
func TestRetentionWindow(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{0: "kept forever", 30 * 24 * time.Hour: "older than 30d",
		36 * time.Hour: "older than 36h0m0s", time.Hour: "older than 1h0m0s"} {
		if got := retentionWindow(d); got != want {
			t.Errorf("retentionWindow(%s) = %q, want %q", d, got, want)
		}
	}
}
