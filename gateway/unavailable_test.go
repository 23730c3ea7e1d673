package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestUnavailableWhilePostgresIsDown: a call the gateway cannot resolve
// because Postgres is down answers 503 overloaded_error with Retry-After in
// the Anthropic form (which Anthropic clients retry), not 500; after the
// restart the same call is answered.
func TestUnavailableWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := storetest.StartPrivate(t)
	db := storetest.Open(t, pg.Migrated(t))
	e := &env{db: db}
	if err := db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ('acme', 'Acme') RETURNING id::text`).Scan(&e.org); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, 'DEMO', 'Demo') RETURNING id::text`, e.org).Scan(&e.project); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SigningKey, cfg.CacheTTL = randomHex(32), 0
	cfg.FakeModels = append(cfg.FakeModels, hello(false).Model) // the model this test's calls name
	fake := fakellm.New(fakellm.Demo())
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	srv, err := New(cfg, db, testRedis(t), prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithFallback(fake))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e.url, e.client = hs.URL, llm.NewClient(hs.URL, []byte(cfg.SigningKey), nil)
	tok := e.token(t)

	if res, body := e.post(t, tok, hello(false)); res.StatusCode != http.StatusOK {
		t.Fatalf("before the stop: %d %s", res.StatusCode, body)
	}
	pg.Stop(t)
	for _, stream := range []bool{false, true} {
		res, body := e.post(t, tok, hello(stream))
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "5" {
			t.Errorf("stream=%v while Postgres is down: %d Retry-After %q %s; want 503, Retry-After 5",
				stream, res.StatusCode, res.Header.Get("Retry-After"), body)
		}
		if d := errorOf(t, body); d.Type != llm.ErrOverloaded || d.Message != "gateway: the database is unavailable; retry in 5 seconds" {
			t.Errorf("stream=%v: error %+v", stream, d)
		}
	}
	pg.Start(t)
	storetest.WaitFor(t, "a call to be answered after the restart", func() bool {
		res, _ := e.post(t, tok, hello(false))
		return res.StatusCode == http.StatusOK
	})
}
