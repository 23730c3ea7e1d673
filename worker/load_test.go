package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// 1,000 turns from 100 sessions on two workers: nothing lost, and every turn
// ends with exactly one done, as its last output.
func TestThousandTurnsFromHundredSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	e.start()
	e.start()
	const sessions, perSession = 100, 10
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = e.session()
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*perSession)
	for _, s := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perSession {
				_, err := e.planner.Send(context.Background(), e.human, s, "go", "")
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	ctx := context.Background()
	var open int
	if !storetest.Poll(3*time.Minute, func() bool {
		must(t, e.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_turns WHERE status IN ('queued', 'running')`).Scan(&open))
		return open == 0
	}) {
		t.Fatalf("%d turns still open after 3 minutes", open)
	}
	var turns, done, dones int
	must(t, e.db.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'done' AND done_reason = 'end_turn')
		FROM planner_turns`).Scan(&turns, &done))
	must(t, e.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_outputs WHERE type = 'done'`).Scan(&dones))
	if turns != sessions*perSession || done != turns || dones != turns {
		t.Fatalf("%d turns, %d ended normally, %d done outputs; want %d each", turns, done, dones, sessions*perSession)
	}
	// done is each turn's last output, and cursors have no gaps.
	for _, s := range ids {
		outs := e.outputs(s, "")
		last := map[string]store.Output{}
		for i, o := range outs {
			if o.Cursor != int64(i+1) {
				t.Fatalf("session %s: cursor %d at index %d", s, o.Cursor, i)
			}
			last[o.Turn] = o
		}
		for turn, o := range last {
			if o.Type != store.OutputDone {
				t.Fatalf("turn %s ends with %s", turn, o.Type)
			}
		}
	}
}
