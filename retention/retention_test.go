package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/promread"
	"github.com/balletplanner/ballet/retention"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// retentionFixture is a project with planner sessions, usage and events
// of various ages, on a database of the test's own.
type retentionFixture struct {
	t       *testing.T
	db      *store.DB
	org     store.Organization
	project store.Project
	human   store.Caller
}

func newRetentionFixture(t *testing.T) *retentionFixture {
	t.Helper()
	fx := storetest.NewProject(t)
	return &retentionFixture{t: t, db: fx.DB, org: fx.Organization, project: fx.Project, human: fx.Human}
}

// exec runs a statement of the fixture's set-up.
func (f *retentionFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Pool().Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// count is a number the fixture reads back.
func (f *retentionFixture) count(sql string, args ...any) int64 {
	f.t.Helper()
	var n int64
	if err := f.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// session sends one message and returns the session and its turn, with
// the turn and its outputs moved to at: ended then when ended is set,
// running since then otherwise. The turn gets started and done (or
// started only) outputs of its own.
func (f *retentionFixture) session(at time.Time, ended bool) (session, turn string) {
	f.t.Helper()
	ctx := context.Background()
	s, err := f.db.CreateSession(ctx, f.human, "WEB", "plan")
	must(f.t, err)
	res, err := f.db.SendMessage(ctx, f.human, s.ID, "hello", "", store.QueueLimits{})
	must(f.t, err)
	types := []string{store.OutputStarted}
	if ended {
		f.exec(`UPDATE planner_turns SET status = 'done', started_at = $2, finished_at = $2 WHERE id = $1`, res.Turn, at)
		types = append(types, store.OutputDone)
	} else {
		f.exec(`UPDATE planner_turns SET status = 'running', started_at = $2 WHERE id = $1`, res.Turn, at)
	}
	for _, typ := range types {
		f.exec(`WITH c AS (UPDATE planner_sessions SET next_cursor = next_cursor + 1 WHERE id = $1 RETURNING next_cursor - 1 AS cursor)
			INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
			SELECT $1::uuid, c.cursor, $2::uuid, $3::text,
			       jsonb_build_object('session', $1::text, 'turn', $2::text, 'cursor', c.cursor, 'type', $3::text), $4
			FROM c`, s.ID, res.Turn, typ, at)
	}
	f.exec(`UPDATE planner_outputs SET created_at = $2 WHERE session_id = $1`, s.ID, at)
	f.exec(`UPDATE planner_messages SET created_at = $2 WHERE session_id = $1`, s.ID, at)
	return s.ID, res.Turn
}

// usage stores one model call made at at.
func (f *retentionFixture) usage(id, model, caller string, at time.Time, in int64) {
	f.t.Helper()
	_, err := f.db.InsertUsage(context.Background(), []store.Usage{{RequestID: id, OrganizationID: f.org.ID,
		ProjectID: f.project.ID, Caller: caller, Provider: "anthropic", Model: model, Status: 200,
		InputTokens: in, OutputTokens: in / 2, CacheReadTokens: 3, CacheWriteTokens: 1, Estimated: in%2 == 1,
		CreatedAt: at}})
	must(f.t, err)
}

// reports are the project's usage reports, every grouping, since the
// start of time and since a day's start.
func (f *retentionFixture) reports(day time.Time) map[string][]store.UsageTotal {
	f.t.Helper()
	out := map[string][]store.UsageTotal{}
	for _, g := range []store.UsageGroup{store.UsageByModel, store.UsageBySession, store.UsageByDay} {
		for _, since := range []time.Time{{}, day} {
			r, err := f.db.UsageReport(context.Background(), f.project.ID, g, since)
			must(f.t, err)
			out[string(g)+" since "+since.Format(time.DateOnly)] = r
		}
	}
	return out
}

// TestRetentionRunWithFakeClock: a run at a fake now deletes exactly what
// is past its window: outputs of ended turns (never their messages, never
// the outputs of a running turn), usage detail rolled up with the same
// report totals, and old events, whose replay is then answered
// resync_required, as is a watch from a deleted cursor. A second run in the
// same interval does nothing; the counters show what went.
func TestRetentionRunWithFakeClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRetentionFixture(t)
	now := time.Date(2026, 6, 30, 12, 30, 0, 0, time.UTC)
	cfg := retention.Config{Outputs: 30 * 24 * time.Hour, UsageDetail: 40 * 24 * time.Hour,
		Events: 30 * 24 * time.Hour, Interval: time.Hour, Batch: 2}

	oldEnded, oldTurn := f.session(now.Add(-31*24*time.Hour), true)
	oldRunning, _ := f.session(now.Add(-31*24*time.Hour), false)
	recent, _ := f.session(now.Add(-24*time.Hour), true)
	oldCursor := f.count(`SELECT max(cursor) FROM planner_outputs WHERE session_id = $1`, oldEnded)
	messages := f.count(`SELECT count(*) FROM planner_messages`)

	// Usage: 5 calls on days past the 40-day window, 2 within it.
	old := now.Add(-50 * 24 * time.Hour)
	for i, at := range []time.Time{old, old.Add(time.Hour), old.Add(24 * time.Hour), old.Add(25 * time.Hour), old.Add(49 * time.Hour)} {
		f.usage("old-"+string(rune('a'+i)), []string{"claude-a", "gpt-b"}[i%2], []string{"alice", "planner:" + oldEnded}[i/3], at, int64(10+i))
	}
	f.usage("new-a", "claude-a", "alice", now.Add(-time.Hour), 7)
	f.usage("new-b", "gpt-b", "alice", now.Add(-2*time.Hour), 8)
	day := old.Add(24 * time.Hour).Truncate(24 * time.Hour)
	before := f.reports(day)

	// Events: the fixture's own (from creating the organization, project
	// and sessions), moved past the window, then one more at now.
	f.exec(`ALTER TABLE events DISABLE TRIGGER events_no_update`)
	f.exec(`UPDATE events SET occurred_at = $1`, now.Add(-31*24*time.Hour))
	f.exec(`ALTER TABLE events ENABLE TRIGGER events_no_update`)
	oldEvents := f.count(`SELECT count(*) FROM events`)
	if oldEvents == 0 {
		t.Fatal("the fixture wrote no events")
	}
	f.exec(`INSERT INTO events (organization_id, project_id, type, entity_type, entity_id, actor_kind, actor_subject, occurred_at)
		VALUES ($1, $2, 'item.created', 'item', 'x', 'system', 'system', $3)`, f.org.ID, f.project.ID, now)
	latest, err := f.db.LatestEventSeq(ctx, f.org.ID)
	must(t, err)

	reg := prometheus.NewRegistry()
	clock := now
	r, err := retention.New(cfg, retention.Deps{DB: f.db, Registry: reg, Now: func() time.Time { return clock }})
	must(t, err)
	rep, err := r.RunOnce(ctx)
	must(t, err)
	if !rep.Ran || !rep.Period.Equal(now.Truncate(time.Hour)) {
		t.Fatalf("run = %+v, want a run of %s", rep, now.Truncate(time.Hour))
	}

	// Outputs: the old ended turn's are gone; the running turn's and the
	// recent ones stay; every message stays.
	for _, tt := range []struct {
		session string
		want    int64
	}{{oldEnded, 0}, {oldRunning, 2}, {recent, 3}} {
		if got := f.count(`SELECT count(*) FROM planner_outputs WHERE session_id = $1`, tt.session); got != tt.want {
			t.Errorf("outputs of session %s = %d, want %d", tt.session, got, tt.want)
		}
	}
	if got := f.count(`SELECT count(*) FROM planner_messages`); got != messages {
		t.Errorf("messages = %d, want all %d kept", got, messages)
	}
	if got := f.count(`SELECT count(*) FROM planner_turns WHERE id = $1`, oldTurn); got != 1 {
		t.Errorf("the old turn is gone")
	}

	// Usage: the 5 old calls moved to usage_daily, the reports are the same.
	if got := f.count(`SELECT count(*) FROM usage`); got != 2 {
		t.Errorf("usage detail rows = %d, want the 2 recent ones", got)
	}
	if got := f.count(`SELECT COALESCE(sum(requests), 0) FROM usage_daily`); got != 5 {
		t.Errorf("rolled-up requests = %d, want 5", got)
	}
	after := f.reports(day)
	for k, want := range before {
		if !equalTotals(after[k], want) {
			t.Errorf("usage by %s after the rollup = %+v, want %+v", k, after[k], want)
		}
	}

	// Events: the old ones are gone, the new one stays; a replay from
	// before the horizon is refused, one from it goes on.
	if got := f.count(`SELECT count(*) FROM events`); got != 1 {
		t.Errorf("events = %d, want only the recent one", got)
	}
	hub := tasks.NewEventHub(f.db, nil)
	from := int64(0)
	if _, err := hub.Subscribe(ctx, f.human, "project:WEB", &from); !store.IsCode(err, store.CodeResyncRequired) {
		t.Errorf("subscribe from seq 0 = %v, want resync_required", err)
	}
	from = latest - 1
	sub, err := hub.Subscribe(ctx, f.human, "project:WEB", &from)
	if err != nil {
		t.Fatalf("subscribe from the horizon: %v", err)
	}
	if e := <-sub.Events(); e.Seq != latest {
		t.Errorf("replayed seq %d, want %d", e.Seq, latest)
	}
	sub.Close()

	// Outputs: a replay from a deleted cursor is refused with the first
	// cursor kept; from 0 it is what is kept.
	_, err = f.db.ListOutputs(ctx, f.human, oldEnded, 1, 100)
	if se := store.AsError(err); se == nil || se.Code != store.CodeResyncRequired || se.Details["first_cursor"] != oldCursor+1 {
		t.Errorf("outputs after cursor 1 = %v, want resync_required with first_cursor %d", err, oldCursor+1)
	}
	rdb, rc := taskstest.New(t)
	watchHub := tasks.NewHub(f.db, rdb, tasks.Names{Namespace: rc.Namespace}, nil)
	if _, err := watchHub.Watch(ctx, f.human, oldEnded, 1); !store.IsCode(err, store.CodeResyncRequired) {
		t.Errorf("watch from cursor 1 = %v, want resync_required", err)
	}
	if outs, err := f.db.ListOutputs(ctx, f.human, oldEnded, 0, 100); err != nil || len(outs) != 0 {
		t.Errorf("outputs from 0 = %d, %v; want none, no error", len(outs), err)
	}
	if _, err := f.db.ListOutputs(ctx, f.human, oldEnded, oldCursor, 100); err != nil {
		t.Errorf("outputs after the last cursor: %v", err)
	}

	// The same interval again: nothing. The next one: a run, nothing left.
	clock = now.Add(10 * time.Minute)
	if rep, err := r.RunOnce(ctx); err != nil || rep.Ran {
		t.Errorf("second run of the interval = %+v, %v; want none", rep, err)
	}
	clock = now.Add(time.Hour)
	rep, err = r.RunOnce(ctx)
	if err != nil || !rep.Ran || rep.Deleted[retention.Outputs]+rep.Deleted[retention.Usage]+rep.Deleted[retention.Events] != 0 {
		t.Errorf("next interval's run = %+v, %v; want a run deleting nothing", rep, err)
	}
	for table, want := range map[string]float64{retention.Outputs: 3, retention.Usage: 5, retention.Events: float64(oldEvents)} {
		if got := deletedTotal(t, reg, table); got != want {
			t.Errorf("ballet_retention_deleted_total{table=%q} = %v, want %v", table, got, want)
		}
	}
}

// deletedTotal reads ballet_retention_deleted_total{table} from reg.
func deletedTotal(t *testing.T, reg *prometheus.Registry, table string) float64 {
	t.Helper()
	v, found, err := promread.Counter(reg, "ballet_retention_deleted_total", "table", table)
	must(t, err)
	if !found {
		t.Fatalf("no ballet_retention_deleted_total{table=%q}", table)
	}
	return v
}

func equalTotals(a, b []store.UsageTotal) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
