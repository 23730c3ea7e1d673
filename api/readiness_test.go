package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// TestReadyzReportsSchemaAndRedis: /readyz of the api and of the shared
// handler the other processes serve, in one shape, on a current, an empty
// and a too-new database and with Redis gone.
func TestReadyzReportsSchemaAndRedis(t *testing.T) {
	t.Parallel()
	want := store.SchemaVersion()
	openDB := func(t *testing.T, url string) *store.DB {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return store.New(pool)
	}
	liveRedis := func(t *testing.T) redis.UniversalClient { rdb, _ := taskstest.New(t); return rdb }
	deadRedis := func(t *testing.T) redis.UniversalClient {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there any more
		rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	tests := []struct {
		name    string
		db      func(t *testing.T) *store.DB
		rdb     func(t *testing.T) redis.UniversalClient
		status  int
		checks  map[string]string // "*" is any text but "ok"
		current int64
	}{
		{"current", func(t *testing.T) *store.DB { return storetest.New(t) }, liveRedis, http.StatusOK,
			map[string]string{"postgres": "ok", "redis": "ok", "schema": "ok"}, want},
		{"no schema", func(t *testing.T) *store.DB { return openDB(t, storetest.EmptyURL(t)) }, liveRedis,
			http.StatusServiceUnavailable, map[string]string{"postgres": "ok", "redis": "ok",
				"schema": fmt.Sprintf(`schema: database at version 0, this binary needs %d: run "ballet migrate up"`, want)}, 0},
		{"database ahead", func(t *testing.T) *store.DB {
			db := storetest.New(t)
			if _, err := db.Pool().Exec(context.Background(),
				`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, want+1); err != nil {
				t.Fatal(err)
			}
			return db
		}, liveRedis, http.StatusOK, map[string]string{"postgres": "ok", "redis": "ok", "schema": "ok"}, want + 1},
		{"redis gone", func(t *testing.T) *store.DB { return storetest.New(t) }, deadRedis, http.StatusServiceUnavailable,
			map[string]string{"postgres": "ok", "redis": "*", "schema": "ok"}, want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, rdb := tt.db(t), tt.rdb(t)
			srv, err := api.New(api.DefaultConfig(), api.DefaultAuthConfig(),
				api.Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := srv.App().Test(httptest.NewRequest("GET", "/readyz", nil), -1)
			if err != nil {
				t.Fatal(err)
			}
			checkReady(t, "api", res, tt.status, tt.checks, tt.current, want)
			rec := httptest.NewRecorder()
			api.NewReadiness(db, rdb).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			checkReady(t, "ops", rec.Result(), tt.status, tt.checks, tt.current, want)
		})
	}
}

func checkReady(t *testing.T, who string, res *http.Response, status int, checks map[string]string, current, expected int64) {
	t.Helper()
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var rep api.ReadyReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("%s: readyz body %s: %v", who, raw, err)
	}
	wantStatus := map[bool]string{true: "ok", false: "unavailable"}[status == http.StatusOK]
	if res.StatusCode != status || rep.Status != wantStatus || res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s: readyz %d %q (%s), want %d %q; body %s", who, res.StatusCode, rep.Status,
			res.Header.Get("Content-Type"), status, wantStatus, raw)
	}
	if len(rep.Checks) != len(checks) {
		t.Errorf("%s: checks %v, want %v", who, rep.Checks, checks)
	}
	for k, v := range checks {
		got := rep.Checks[k]
		if (v == "*" && (got == "" || got == "ok")) || (v != "*" && got != v) {
			t.Errorf("%s: checks[%s] = %q, want %q", who, k, got, v)
		}
	}
	if rep.Schema == nil || rep.Schema.Current != current || rep.Schema.Expected != expected {
		t.Errorf("%s: schema %+v, want current %d expected %d; body %s", who, rep.Schema, current, expected, raw)
	}
	if !strings.Contains(string(raw), `"schema":{"current":`) {
		t.Errorf("%s: body %s lacks the schema versions", who, raw)
	}
}
