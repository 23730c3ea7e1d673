package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// readyz GETs /readyz at addr; ok is false while nothing answers there.
func readyz(addr string) (status int, rep api.ReadyReport, raw string, ok bool) {
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, rep, err.Error(), false
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(b, &rep)
	return res.StatusCode, rep, string(b), true
}

// migrateURL applies the migrations to the database at url.
func migrateURL(t *testing.T, url string) {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.URL = url
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// behindMessage is /readyz's schema check on a database nobody migrated.
func behindMessage() string {
	return fmt.Sprintf(`schema: database at version 0, this binary needs %d: run "ballet migrate up"`, store.SchemaVersion())
}

// startUnmigrated starts `ballet command` with database.migrate off on a
// database nobody migrated, with env added; it returns the process, the
// database's URL and the gateway's address.
func startUnmigrated(t *testing.T, command string, env ...string) (p *process, url, gateway string) {
	t.Helper()
	url = storetest.EmptyURL(t)
	rc := taskstest.Config(t)
	gateway = freeAddr(t)
	p = startProcess(t, append([]string{"BALLET_DATABASE_URL=" + url, "BALLET_DATABASE_MIGRATE=false",
		"BALLET_REDIS_URL=" + rc.URL, "BALLET_REDIS_NAMESPACE=" + rc.Namespace, "BALLET_GATEWAY_ADDR=" + gateway,
		"BALLET_GATEWAY_SIGNING_KEY=test-signing-key-0123456789abcdef"}, env...), command)
	return p, url, gateway
}

// readyzWhenUp polls addr's /readyz until it answers, and returns the answer.
func readyzWhenUp(t *testing.T, addr string) (status int, rep api.ReadyReport, raw string) {
	t.Helper()
	storetest.WaitFor(t, "/readyz on "+addr+" to answer", func() bool {
		var up bool
		status, rep, raw, up = readyz(addr)
		return up
	})
	return status, rep, raw
}

// TestReadyzWithoutSchema: a process started with database.migrate off on a
// database nobody migrated answers /readyz with 503 naming the versions, on
// its public port and its metrics listener, in the api's shape, logs no
// query error, and is ready with the versions once the database is migrated.
func TestReadyzWithoutSchema(t *testing.T) {
	t.Parallel()
	want, msg := store.SchemaVersion(), behindMessage()
	for _, command := range []string{"api", "gateway"} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			p, url, gw := startUnmigrated(t, command)
			public := p.addr
			if command == "gateway" {
				public = gw
			}
			for _, addr := range []string{public, p.metrics} {
				status, rep, raw := readyzWhenUp(t, addr)
				if status != http.StatusServiceUnavailable || rep.Status != "unavailable" || rep.Checks["schema"] != msg ||
					rep.Checks["postgres"] != "ok" || rep.Checks["redis"] != "ok" ||
					rep.Schema == nil || rep.Schema.Current != 0 || rep.Schema.Expected != want {
					t.Errorf("%s /readyz on an empty database: %d %s; want 503 with schema %q", addr, status, raw, msg)
				}
			}
			migrateURL(t, url)
			for _, addr := range []string{public, p.metrics} {
				var raw string
				storetest.WaitFor(t, "/readyz on "+addr+" to be 200 after the migration", func() bool {
					var status int
					status, _, raw, _ = readyz(addr)
					return status == http.StatusOK
				})
				checks := `"postgres":"ok","redis":"ok","schema":"ok"`
				if command == "api" && addr == p.metrics {
					checks = `"listener":"ok",` + checks // the api's public listener serves
				}
				wantBody := fmt.Sprintf(`{"status":"ok","checks":{%s},"schema":{"current":%d,"expected":%d}}`,
					checks, want, want)
				if strings.TrimSpace(raw) != wantBody {
					t.Errorf("%s /readyz: %s, want %s", addr, raw, wantBody)
				}
			}
			p.stop(t)
			if log := p.log(); strings.Contains(log, "does not exist") || strings.Contains(log, `"level":"ERROR"`) {
				t.Errorf("log of a process on an empty database:\n%s", log)
			}
		})
	}
}

// gate is the process's schema gate on db, logging at level to log and
// looking every 5 ms instead of every second.
func gate(db *store.DB, level string, log io.Writer) *schemaGate {
	g := (&runtime{db: db, log: newLogger(LogConfig{Level: level, Format: "json"}, log)}).newSchemaGate()
	g.every = 5 * time.Millisecond
	return g
}

// TestSchemaGateWaitsAndLogsOnce: on a database without the schema the gate
// logs one warning naming the versions, however many times it looks, and
// lets the start go on as soon as the database is migrated.
func TestSchemaGateWaitsAndLogsOnce(t *testing.T) {
	t.Parallel()
	url := storetest.EmptyURL(t)
	log := &logtest.Buffer{}
	cfg := store.DefaultConfig()
	cfg.URL = url
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	g := gate(db, "debug", log)
	done := make(chan error, 1)
	go func() { done <- g.Start(context.Background()) }()
	// A later event: the gate has looked many times since its warning.
	storetest.WaitFor(t, "ten looks at the schema", func() bool { return strings.Count(log.String(), "still waiting") >= 10 })
	want := fmt.Sprintf(`schema: waiting: schema: database at version 0, this binary needs %d: run \"ballet migrate up\"`,
		store.SchemaVersion())
	if n := strings.Count(log.String(), `"level":"WARN"`); n != 1 || !strings.Contains(log.String(), want) {
		t.Fatalf("%d warnings, want one containing %s:\n%s", n, want, log.String())
	}
	select {
	case err := <-done:
		t.Fatalf("gate returned %v on an empty database", err)
	default:
	}
	migrateURL(t, url)
	storetest.WaitFor(t, "the gate to open", func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("gate: %v", err)
			}
			return true
		default:
			return false
		}
	})
	if n := strings.Count(log.String(), `"level":"WARN"`); n != 1 || !strings.Contains(log.String(), "schema: current; starting") {
		t.Fatalf("after the migration: %d warnings, want 1, and the start logged:\n%s", n, log.String())
	}
}

// TestSchemaGateOnCurrentOrNewerSchema: on a migrated database (what
// database.migrate = true leaves) and on one ahead of the binary the gate
// opens at once and logs nothing; stopped while it waits, it returns the
// context's error without another line.
func TestSchemaGateOnCurrentOrNewerSchema(t *testing.T) {
	t.Parallel()
	current := storetest.New(t)
	ahead := storetest.New(t)
	if _, err := ahead.Pool().Exec(context.Background(),
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, store.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	for name, db := range map[string]*store.DB{"current": current, "ahead": ahead} {
		log := &logtest.Buffer{}
		g := gate(db, "debug", log)
		if err := g.Start(context.Background()); err != nil || log.String() != "" {
			t.Errorf("%s: gate %v, log %q; want nil and no line", name, err, log.String())
		}
	}
	url := storetest.EmptyURL(t)
	cfg := store.DefaultConfig()
	cfg.URL = url
	empty, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(empty.Close)
	log := &logtest.Buffer{}
	g := gate(empty, "info", log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	storetest.WaitFor(t, "the warning", func() bool { return strings.Contains(log.String(), "schema: waiting") })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("stopped gate: %v, want context.Canceled", err)
	}
	if n := strings.Count(log.String(), "\n"); n != 1 {
		t.Fatalf("%d lines, want the one warning:\n%s", n, log.String())
	}
}

// TestMigrateCheck: exit 0 on a current database, 1 with a message naming
// the versions on an empty and a too-new one; the check writes nothing.
func TestMigrateCheck(t *testing.T) {
	t.Parallel()
	want := store.SchemaVersion()
	tooNew := storetest.URL(t)
	migrateURL(t, tooNew)
	cfg := store.DefaultConfig()
	cfg.URL = tooNew
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(context.Background(),
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, want+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	empty := storetest.EmptyURL(t)
	tests := []struct {
		name   string
		url    string
		code   int
		stdout string
		stderr string
	}{
		{"current", storetest.URL(t), 0, fmt.Sprintf("migrate check: schema current at version %d\n", want), ""},
		{"empty", empty, 1, "", fmt.Sprintf(`ballet: migrate check: %d migration(s) pending: schema: database at version 0, this binary needs %d: run "ballet migrate up"`+"\n",
			embeddedMigrations(t), want)},
		{"too new", tooNew, 1, "", fmt.Sprintf("ballet: migrate check: schema: database at version %d is ahead of this binary, which knows up to %d: run the release that applied %d or newer\n",
			want+1, want, want+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + tt.url}, "migrate", "check")
			if code != tt.code || out != tt.stdout || stderr != tt.stderr {
				t.Errorf("migrate check: exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	// The check on the empty database made no version table.
	cfg.URL = empty
	edb, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer edb.Close()
	var table *string
	if err := edb.Pool().QueryRow(context.Background(), `SELECT to_regclass('goose_db_version')::text`).Scan(&table); err != nil || table != nil {
		t.Errorf("version table after migrate check on an empty database: %v %v", table, err)
	}
}

// embeddedMigrations counts the embedded migrations.
func embeddedMigrations(t *testing.T) int {
	t.Helper()
	entries, err := fs.ReadDir(store.Migrations(), ".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			n++
		}
	}
	return n
}
