package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
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
	e := &env{srv: srv, db: db, tokens: map[string]string{}}
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

// TestLocalModeRefusesOtherHostsAndOrigins keeps DNS rebinding and other
// sites out of local mode: the Host (and the Origin, when sent) must be a
// loopback name or address with the server's port.
func TestLocalModeRefusesOtherHostsAndOrigins(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, api.AuthConfig{Mode: api.AuthLocal}, nil)
	_, port, err := net.SplitHostPort(e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		host    string
		origin  string
		status  int
		message string
	}{
		{"127.0.0.1", "127.0.0.1:" + port, "", 200, ""},
		{"localhost", "localhost:" + port, "", 200, ""},
		{"LOCALHOST with a same-site origin", "LOCALHOST:" + port, "http://localhost:" + port, 200, ""},
		{"127.0.0.0/8", "127.1.2.3:" + port, "http://127.0.0.1:" + port, 200, ""},
		{"[::1]", "[::1]:" + port, "http://[::1]:" + port, 200, ""},
		{"rebound name", "evil.example.com:" + port, "", 403, `Host "evil.example.com:` + port + `"`},
		{"rebound name without port", "evil.example.com", "", 403, "Host"},
		{"loopback on another port", "127.0.0.1:1", "", 403, "Host"},
		{"localhost without port", "localhost", "", 403, "Host"},
		{"a name under localhost", "localhost.evil.example.com:" + port, "", 403, "Host"},
		{"other origin", "127.0.0.1:" + port, "https://evil.example.com", 403, `Origin "https://evil.example.com"`},
		{"origin on another port", "127.0.0.1:" + port, "http://127.0.0.1:3000", 403, "Origin"},
		{"null origin", "127.0.0.1:" + port, "null", 403, "Origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "o" + strings.ReplaceAll(strings.ToLower(tt.name), " ", "")
			key = regexp.MustCompile(`[^a-z0-9]`).ReplaceAllString(key, "")
			if len(key) > 30 {
				key = key[:30]
			}
			body := `{"key":"` + key + `","name":"X"}`
			status, raw := localRequest(t, e, "POST", "/api/v1/organizations", tt.host, tt.origin, body)
			if status != tt.status && !(tt.status == 200 && status == 201) {
				t.Fatalf("status %d, want %d; body %s", status, tt.status, raw)
			}
			var n int
			if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM organizations WHERE key = $1`, key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if tt.status == 403 {
				var reply struct{ Error, Message string }
				_ = json.Unmarshal([]byte(raw), &reply)
				if reply.Error != "forbidden" || !strings.Contains(reply.Message, tt.message) || !strings.Contains(reply.Message, "loopback") {
					t.Fatalf("body %s, want forbidden naming %q and loopback", raw, tt.message)
				}
				if n != 0 {
					t.Fatalf("a refused request created organization %s", key)
				}
				return
			}
			if n != 1 {
				t.Fatalf("organization %s not created", key)
			}
		})
	}
}

// localRequest sends one request with the given Host and Origin ("" sends
// none) and returns the status and body.
func localRequest(t *testing.T, e *env, method, path, host, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.srv.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(raw)
}
