package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestAPostgresCrashFailsNoTurn: Postgres crashes and restarts while
// `ballet serve` runs turns; every accepted turn ends as it would have
// (end_turn), none with the gateway's "database unavailable" error: the
// worker waits the outage out and resumes.
func TestAPostgresCrashFailsNoTurn(t *testing.T) {
	t.Parallel()
	pg := storetest.StartPrivate(t)
	url := pg.Migrated(t)
	script := filepath.Join(t.TempDir(), "model.yaml")
	must(t, os.WriteFile(script, []byte("loop: true\nanswers:\n  - latency: 1s\n    content:\n      - text: Here is the plan.\n"), 0o600))
	p, token, _ := startDemoServe(t, script, "BALLET_DATABASE_URL="+url, "BALLET_GATEWAY_CACHE_TTL=0s")
	c := client{t: t, base: "http://" + p.addr + "/api/v1", token: token}
	const turns = 6
	for i := range turns {
		var sess struct{ ID string }
		if s := c.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": fmt.Sprint("crash ", i)}, &sess); s != 201 {
			t.Fatalf("create session: %d", s)
		}
		if s := c.do("POST", "/planner/sessions/"+sess.ID+"/messages", map[string]any{"text": "what next?"}, nil); s != 202 {
			t.Fatalf("send: %d", s)
		}
	}
	db := storetest.Open(t, url)
	storetest.WaitFor(t, "a turn running", func() bool {
		var n int
		return db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_turns WHERE started_at IS NOT NULL`).Scan(&n) == nil && n > 0
	})
	pg.Crash(t)
	storetest.WaitFor(t, "the api to see Postgres gone", func() bool {
		res, err := http.Get("http://" + p.metrics + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable
	})
	pg.Start(t)
	storetest.WaitForWithin(t, 5*storetest.WaitTimeout, "every turn to end", func() bool {
		var open int
		return db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_turns WHERE finished_at IS NULL`).Scan(&open) == nil && open == 0
	})
	rows, err := db.Pool().Query(context.Background(), `SELECT status, COALESCE(done_reason, '') FROM planner_turns`)
	must(t, err)
	ended := 0
	for rows.Next() {
		var status, reason string
		must(t, rows.Scan(&status, &reason))
		if reason != "end_turn" {
			t.Errorf("a turn ended %s / %s, want done / end_turn", status, reason)
		}
		ended++
	}
	must(t, rows.Err())
	if ended != turns {
		t.Fatalf("%d turns, want %d", ended, turns)
	}
	var failed int
	must(t, db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_outputs WHERE type = 'error'`).Scan(&failed))
	if failed != 0 {
		t.Fatalf("%d error outputs", failed)
	}
}
