package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestReadyzWorkerWaitsForSchema: a worker (alone or in serve) started with
// database.migrate off on a database nobody migrated stays up, answers
// /readyz with 503 naming the versions, logs one warning however long it
// waits and no query error, and starts once the database is migrated.
func TestReadyzWorkerWaitsForSchema(t *testing.T) {
	t.Parallel()
	msg := behindMessage()
	for _, command := range []string{"worker", "serve"} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			p, url, gw := startUnmigrated(t, command, "BALLET_LOG_LEVEL=debug")
			probe := p.addr // worker.addr
			if command == "serve" {
				probe = gw // the api port opens once the worker has started
			}
			for _, addr := range []string{probe, p.metrics} {
				status, rep, raw := readyzWhenUp(t, addr)
				if status != http.StatusServiceUnavailable || rep.Checks["schema"] != msg {
					t.Errorf("%s /readyz on an empty database: %d %s; want 503 with schema %q", addr, status, raw, msg)
				}
			}
			// A later event: three looks at the schema, a second apart.
			storetest.WaitFor(t, "three looks at the schema", func() bool { return strings.Count(p.log(), "schema: still waiting") >= 3 })
			if log := p.log(); strings.Count(log, `"level":"WARN"`) != 1 || !strings.Contains(log, "schema: waiting: "+strings.ReplaceAll(msg, `"`, `\"`)) ||
				strings.Contains(log, "does not exist") || strings.Contains(log, `"level":"ERROR"`) {
				t.Fatalf("want exactly one warning naming the versions:\n%s", log)
			}
			migrateURL(t, url)
			storetest.WaitFor(t, "the worker to start", func() bool { return strings.Contains(p.log(), "worker started") })
			if command == "serve" {
				probe = p.addr
			}
			storetest.WaitFor(t, "/readyz 200 after the migration", func() bool { s, _, _, _ := readyz(probe); return s == http.StatusOK })
			p.stop(t)
			if log := p.log(); strings.Count(log, `"level":"WARN"`) != 1 || strings.Contains(log, "does not exist") {
				t.Errorf("log:\n%s", log)
			}
		})
	}
}
