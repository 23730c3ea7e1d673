package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestUnavailableWhilePostgresIsDown: with Postgres stopped every request
// that needs it answers 503 unavailable with Retry-After, not 500; once the
// server is back the same requests succeed again.
func TestUnavailableWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	pg := storetest.StartPrivate(t)
	e := newEnvOn(t, storetest.Open(t, pg.Migrated(t)))
	get := func(path string) (int, string, map[string]any) {
		req, _ := http.NewRequest("GET", "http://"+e.srv.Addr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.tokens["engineer"])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", map[string]any{"transport": err.Error()}
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		return res.StatusCode, res.Header.Get("Retry-After"), body
	}
	paths := []string{"/api/v1/projects/WEB/items", "/api/v1/projects/WEB/runnable", "/api/v1/organizations/acme"}
	for _, p := range paths {
		if status, _, body := get(p); status != http.StatusOK {
			t.Fatalf("GET %s before the stop: %d %v", p, status, body)
		}
	}
	pg.Stop(t)
	for _, p := range paths {
		status, retry, body := get(p)
		if status != http.StatusServiceUnavailable || body["error"] != "unavailable" || retry != "5" {
			t.Errorf("GET %s while Postgres is down: %d Retry-After %q %v; want 503 unavailable, Retry-After 5", p, status, retry, body)
		}
		if msg, _ := body["message"].(string); msg != "the database is unavailable; retry in 5 seconds" {
			t.Errorf("GET %s: message %q", p, msg)
		}
	}
	// A write is refused whole: nothing of it is there after the restart.
	w := e.do("POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": "while down"})
	if w.Status != http.StatusServiceUnavailable || w.errorCode() != "unavailable" {
		t.Errorf("POST while Postgres is down: %d %s", w.Status, w.Raw)
	}
	if status, _, _ := get("/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("readyz while Postgres is down: %d", status)
	}
	pg.Start(t)
	for _, p := range paths {
		storetest.WaitFor(t, "GET "+p+" to succeed after the restart", func() bool {
			status, _, _ := get(p)
			return status == http.StatusOK
		})
	}
	if r := e.do("GET", "/api/v1/projects/WEB/items", "engineer", nil).expect(t, http.StatusOK); len(r.Body["items"].([]any)) != 0 {
		t.Fatalf("the refused write left items: %s", r.Raw)
	}
}

// TestRequestsThroughAPostgresCrash: requests in flight while Postgres
// crashes (immediate mode: every connection dropped, no checkpoint) and
// restarts each get an answer, a success or 503 unavailable, never 500 and
// never none; every write that answered 201 is there after the restart.
func TestRequestsThroughAPostgresCrash(t *testing.T) {
	t.Parallel()
	pg := storetest.StartPrivate(t)
	e := newEnvOn(t, storetest.Open(t, pg.Migrated(t)))
	var (
		mu          sync.Mutex
		bad         []string
		created     []string
		ok, refused atomic.Int64
		wg          sync.WaitGroup
	)
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var r response
				if (g+i)%2 == 0 {
					r = e.do("POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": fmt.Sprint("crash ", g, " ", i)})
				} else {
					r = e.do("GET", "/api/v1/projects/WEB/runnable", "engineer", nil)
				}
				mu.Lock()
				switch {
				case r.Status == http.StatusCreated:
					created = append(created, fmt.Sprint(r.Body["key"]))
					ok.Add(1)
				case r.Status == http.StatusOK:
					ok.Add(1)
				case r.Status == http.StatusServiceUnavailable && r.errorCode() == "unavailable":
					refused.Add(1)
				default:
					bad = append(bad, fmt.Sprintf("%d %s", r.Status, r.Raw))
				}
				mu.Unlock()
			}
		}()
	}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
	}()
	storetest.WaitFor(t, "requests before the crash", func() bool { return ok.Load() >= 20 })
	pg.Crash(t)
	storetest.WaitFor(t, "503s while Postgres is down", func() bool { return refused.Load() >= 20 })
	pg.Start(t)
	before := ok.Load()
	storetest.WaitFor(t, "requests to succeed after the restart", func() bool { return ok.Load() >= before+20 })
	close(stop)
	wg.Wait()
	stopped = true
	if len(bad) > 0 {
		t.Fatalf("%d requests got neither a success nor 503 unavailable, e.g. %s", len(bad), bad[0])
	}
	for _, key := range created {
		e.do("GET", "/api/v1/items/"+key, "engineer", nil).expect(t, http.StatusOK)
	}
	t.Logf("%d answered, %d refused with 503, %d items created and found", ok.Load(), refused.Load(), len(created))
}

// TestRPCErrorOf: the realtime API's one table, including the unavailable
// twin of REST's 503 with Retry-After.
func TestRPCErrorOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		code int
		data map[string]any
	}{
		{"unavailable", &pgconn.PgError{Code: "57P01"}, api.RPCInternal,
			map[string]any{"code": store.CodeUnavailable, "retry_after": 5}},
		{"not found", store.Errorf(store.CodeNotFound, "item WEB-9 not found"), api.RPCNotFound,
			map[string]any{"code": store.CodeNotFound}},
		{"invalid", store.Errorf(store.CodeInvalid, "text: must not be blank"), api.RPCInvalidParams,
			map[string]any{"code": store.CodeInvalid}},
		{"conflict", store.Errorf(store.CodeConflict, "stale"), api.RPCConflict, map[string]any{"code": store.CodeConflict}},
		{"unauthenticated", store.Errorf(store.CodeUnauthenticated, "x"), api.RPCUnauthenticated,
			map[string]any{"code": store.CodeUnauthenticated}},
		{"forbidden", store.Errorf(store.CodeForbidden, "x"), api.RPCForbidden, map[string]any{"code": store.CodeForbidden}},
		{"bug", errors.New("boom"), api.RPCInternal, map[string]any{"code": store.CodeInternal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := api.RPCErrorOf(tt.err)
			if got.Code != tt.code || !reflect.DeepEqual(got.Data, tt.data) {
				t.Fatalf("RPCErrorOf(%v) = %+v, want code %d data %v", tt.err, got, tt.code, tt.data)
			}
			if tt.name == "bug" && got.Message != "internal error" {
				t.Fatalf("a bug's message leaks: %q", got.Message)
			}
		})
	}
}
