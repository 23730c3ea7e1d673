package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
)

// immediate counts a send's turn as it is inserted rather than at commit.
const immediate = `DROP TRIGGER planner_turns_queue_insert ON planner_turns;
	CREATE TRIGGER planner_turns_queue_insert AFTER INSERT ON planner_turns
	FOR EACH ROW WHEN (NEW.status = 'queued') EXECUTE FUNCTION planner_queue_count()`

// BenchmarkConcurrentSends sends from 200 sessions at once through a pool of
// 40 connections, with the queue counters as migrated (16 shards, counted
// at commit) and, to compare, with one shard, counted at once, or not at
// all. p50-ns and p99-ns include the wait for a connection; lock-waiters is
// the mean number of backends waiting for a lock.
func BenchmarkConcurrentSends(b *testing.B) {
	variants := []struct {
		name  string
		setup string
	}{
		{"shards=16,at-commit", ``},
		{"shards=1,at-commit", `CREATE OR REPLACE FUNCTION planner_queue_shard(session uuid) RETURNS smallint
			LANGUAGE sql IMMUTABLE AS $$ SELECT 0::smallint $$`},
		{"shards=16,immediate", immediate},
		{"shards=1,immediate", `CREATE OR REPLACE FUNCTION planner_queue_shard(session uuid) RETURNS smallint
			LANGUAGE sql IMMUTABLE AS $$ SELECT 0::smallint $$;` + immediate},
		{"no-counters", `DROP TRIGGER planner_turns_queue_insert ON planner_turns;
			DROP TRIGGER planner_turns_queue_update ON planner_turns;
			DROP TRIGGER planner_turns_queue_delete ON planner_turns`},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			f := newTrackerFixture(b)
			if v.setup != "" {
				if _, err := f.db.Pool().Exec(ctx, v.setup); err != nil {
					b.Fatal(err)
				}
			}
			pc := f.db.Pool().Config().Copy()
			pc.MaxConns = 40
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			db := store.New(pool)
			limits := store.QueueLimits{Total: 1 << 30, PerProject: 1 << 30}
			if v.name == "no-counters" {
				limits = store.QueueLimits{}
			}
			const sessions = 200
			ids := make([]string, sessions)
			for i := range ids {
				s, err := db.CreateSession(ctx, f.engineer, "WEB", "bench")
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = s.ID
			}
			perSession := max(1, b.N/sessions)
			var mu sync.Mutex
			var took []time.Duration
			var wg sync.WaitGroup
			errs := make(chan error, sessions)
			// Backends waiting for a lock are sampled every millisecond.
			stop := make(chan struct{})
			var samples, waiting int64
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					var n int64
					if err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
						WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err == nil {
						samples++
						waiting += n
					}
				}
			}()
			b.ResetTimer()
			start := time.Now()
			for _, id := range ids {
				wg.Go(func() {
					mine := make([]time.Duration, 0, perSession)
					for range perSession {
						t0 := time.Now()
						if _, err := db.SendMessage(ctx, f.engineer, id, "hello", "", limits); err != nil {
							errs <- err
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					took = append(took, mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			<-sampled
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			slices.Sort(took)
			b.ReportMetric(float64(len(took))/elapsed.Seconds(), "sends/s")
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
			if samples > 0 {
				b.ReportMetric(float64(waiting)/float64(samples), "lock-waiters")
			}
		})
	}
}
