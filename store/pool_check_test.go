package store_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// openNamed opens a pool named like a ballet process, logging to log.
func openNamed(t *testing.T, url, name string, maxConns int32, log *logtest.Buffer) *store.DB {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.URL, cfg.MaxConns, cfg.ApplicationName = url, maxConns, name
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// TestOpenWarnsWhenPoolsOutgrowTheServer: on a server with
// max_connections 50 (3 reserved), two ballet processes are connected; a
// third whose pools would add up past 47 connections says so once, with
// the numbers and what to change, and one whose pools fit says nothing.
func TestOpenWarnsWhenPoolsOutgrowTheServer(t *testing.T) {
	t.Parallel()
	pg := storetest.StartPrivate(t)
	url := pg.URL("postgres")
	var quiet logtest.Buffer
	openNamed(t, url, "ballet-api", 10, &quiet)
	openNamed(t, url, "ballet-worker", 10, &quiet)
	for _, tc := range []struct {
		maxConns int32
		want     string // "" = no warning
	}{
		{10, ""},
		{20, "3 processes × database.max_conns 20 = 60 > max_connections 50 − 3 reserved = 47; " +
			"once they are all in use, new connections fail (sorry, too many clients already); " +
			"set database.max_conns to at most 15 in every process, or raise the server's max_connections"},
	} {
		var log logtest.Buffer
		db := openNamed(t, url, "ballet-gateway", tc.maxConns, &log)
		b, err := db.PoolBudget(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if b.Processes != 3 || b.MaxConnections != 50 || b.Reserved != 3 {
			t.Fatalf("max_conns %d: budget %+v, want 3 processes of 50 − 3 connections", tc.maxConns, b)
		}
		got := log.String()
		switch {
		case tc.want == "" && got != "":
			t.Errorf("max_conns %d: unexpected log %s", tc.maxConns, got)
		case tc.want != "" && (!strings.Contains(got, "level=WARN") || !strings.Contains(got, tc.want) ||
			strings.Count(got, "\n") != 1):
			t.Errorf("max_conns %d: log\n%s\nwant one warning with\n%s", tc.maxConns, got, tc.want)
		}
		db.Close()
	}
	// Operators see which process holds which connections.
	db := openNamed(t, url, "ballet-api", 10, &quiet)
	var names []string
	storetest.WaitFor(t, "the pools' connections in pg_stat_activity", func() bool {
		rows, err := db.Pool().Query(context.Background(), `SELECT DISTINCT split_part(application_name, '/', 1)
			FROM pg_stat_activity WHERE application_name LIKE 'ballet-%' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return rows.Err() == nil && strings.Join(names, ",") == "ballet-api,ballet-worker"
	})
}

// TestStatementTimeout: every pooled statement runs under
// database.statement_timeout and fails clearly past it; 0 leaves none.
func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	for _, tc := range []struct {
		timeout time.Duration
		fails   bool
	}{
		{200 * time.Millisecond, true},
		{0, false},
	} {
		cfg := store.DefaultConfig()
		cfg.URL, cfg.StatementTimeout = url, tc.timeout
		db, err := store.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var shown string
		if err := db.Pool().QueryRow(context.Background(), "SHOW statement_timeout").Scan(&shown); err != nil {
			t.Fatal(err)
		}
		_, err = db.Pool().Exec(context.Background(), "SELECT pg_sleep(0.5)")
		var pe *pgconn.PgError
		switch {
		case tc.fails && (!errors.As(err, &pe) || pe.Code != "57014" ||
			!strings.Contains(err.Error(), "canceling statement due to statement timeout")):
			t.Errorf("timeout %s (shown %s): a 0.5 s statement: %v, want canceled by the statement timeout", tc.timeout, shown, err)
		case !tc.fails && err != nil:
			t.Errorf("no timeout (shown %s): a 0.5 s statement: %v", shown, err)
		}
	}
	if err := (store.Config{URL: url, MaxConns: 10, ConnectTimeout: time.Second, StatementTimeout: -time.Second,
		SearchMaxConns: 1, SearchMaxConnsPerOrg: 1, SearchTimeout: time.Second, SearchMaxTerms: 1, SearchMaxChars: 1}).Validate(); err == nil ||
		err.Error() != "database.statement_timeout: must not be negative (0 is none)" {
		t.Errorf("negative statement_timeout: %v", err)
	}
}
