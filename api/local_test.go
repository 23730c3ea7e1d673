package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// newAuthEnv is an api like newEnv's but with the given auth configuration
// and logger, on a database holding only organization acme and project WEB.
// It has no tokens; tests add their own.
func newAuthEnv(t *testing.T, auth api.AuthConfig, log *slog.Logger) *env {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t)
	rdb, _ := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	srv, err := api.New(cfg, auth, api.Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Log: log, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e := &env{t: t, srv: srv, db: db, tokens: map[string]string{}}
	if e.org, err = db.CreateOrganization(ctx, "acme", "Acme", store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	if e.project, err = db.CreateProject(ctx, e.org.ID, "WEB", "Web", store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLocalModeIsPlatformAdminLocal(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, api.AuthConfig{Mode: api.AuthLocal}, nil)
	e.tokens["garbage"] = "not-a-token"
	tests := []struct {
		name   string
		method string
		path   string
		who    string
		body   any
		status int
	}{
		{"no token lists organizations", "GET", "/api/v1/organizations", "", nil, 200},
		{"any token is ignored", "GET", "/api/v1/organizations/acme", "garbage", nil, 200},
		{"organization.create is platform-admin only", "POST", "/api/v1/organizations", "", map[string]any{"key": "initech", "name": "Initech"}, 201},
		{"projects", "POST", "/api/v1/organizations/initech/projects", "", map[string]any{"key": "INI", "name": "Ini"}, 201},
		{"role bindings", "POST", "/api/v1/organizations/acme/role-bindings", "", map[string]any{"subject": "bob", "role": "viewer"}, 201},
		{"tokens are the local subject's", "POST", "/api/v1/tokens", "", map[string]any{"name": "laptop"}, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.do(tt.method, tt.path, tt.who, tt.body).expect(t, tt.status)
		})
	}
	r := e.do("GET", "/api/v1/tokens", "", nil).expect(t, http.StatusOK)
	items, _ := r.Body["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["subject"] != "local" {
		t.Fatalf("tokens %s", r.Raw)
	}
	var actor string
	if err := e.db.Pool().QueryRow(context.Background(),
		`SELECT actor_subject FROM events WHERE type = 'organization.created' AND entity_key = 'initech'`).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if actor != "local" {
		t.Fatalf("organization.created actor %q, want local", actor)
	}
}
