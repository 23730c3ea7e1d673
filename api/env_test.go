package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// env is an api on a database and Redis key space of the test's own, with
// one organization "acme", project "WEB", and tokens for each role.
type env struct {
	srv     *api.Server
	db      *store.DB
	org     store.Organization
	project store.Project
	// Other organization and its project, for isolation checks.
	otherOrg     store.Organization
	otherProject store.Project
	// Tokens by name: admin (organization-admin of acme), engineer, viewer,
	// approver (project scope on WEB), platform (platform-admin),
	// outsider (organization-admin of the other organization).
	tokens map[string]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, storetest.New(t))
}

// newEnvOn is newEnv on a database the test made itself (e.g. on a
// private server it stops).
func newEnvOn(t *testing.T, db *store.DB) *env {
	t.Helper()
	ctx := context.Background()
	rdb, _ := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	srv, err := api.New(cfg, api.DefaultAuthConfig(),
		api.Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e := &env{srv: srv, db: db, tokens: map[string]string{}}
	sys := store.SystemActor()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.org, err = db.CreateOrganization(ctx, "acme", "Acme", sys)
	must(err)
	e.project, err = db.CreateProject(ctx, e.org.ID, "WEB", "Web", sys)
	must(err)
	e.otherOrg, err = db.CreateOrganization(ctx, "globex", "Globex", sys)
	must(err)
	e.otherProject, err = db.CreateProject(ctx, e.otherOrg.ID, "GLX", "Globex main", sys)
	must(err)
	orgScope := store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.org.ID}
	projScope := store.Scope{Kind: store.ScopeProject, OrganizationID: e.org.ID, ProjectID: e.project.ID}
	for name, b := range map[string]struct {
		role  store.Role
		scope store.Scope
	}{
		"admin":    {store.RoleOrganizationAdmin, orgScope},
		"engineer": {store.RoleEngineer, projScope},
		"viewer":   {store.RoleViewer, projScope},
		"approver": {store.RoleApprover, projScope},
		"platform": {store.RolePlatformAdmin, store.Scope{Kind: store.ScopePlatform}},
		"outsider": {store.RoleOrganizationAdmin, store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.otherOrg.ID}},
	} {
		_, err := db.CreateRoleBinding(ctx, name+"@example.com", b.role, b.scope, sys)
		must(err)
		tok, _, err := db.CreateAPIToken(ctx, name+"@example.com", "test", 0)
		must(err)
		e.tokens[name] = tok
	}
	return e
}

// response is a decoded reply.
type response struct {
	Status int
	Body   map[string]any
	Raw    []byte
	// Err is the transport error when no reply came (Status is then 0).
	Err error
}

// do sends a request as the named token holder ("" sends none). body may be
// nil, a string (sent as is) or anything JSON-encodable. It fails no test:
// a request that got no reply has Status 0 and Err set, which expect (called
// with the *testing.T of the test that checks it) reports.
func (e *env) do(method, path, who string, body any) response {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			panic(fmt.Sprintf("do %s %s: encode body: %v", method, path, err))
		}
		r = bytes.NewReader(buf)
	}
	contentType := ""
	if body != nil {
		contentType = "application/json"
	}
	return e.request(method, path, who, contentType, r)
}

// request sends body with the Content-Type ("" sends none) as the named
// token holder and reads the reply; like do, it fails no test.
func (e *env) request(method, path, who, contentType string, body io.Reader) response {
	req, err := http.NewRequest(method, "http://"+e.srv.Addr()+path, body)
	if err != nil {
		return failed(fmt.Errorf("%s %s: %w", method, path, err))
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return failed(fmt.Errorf("%s %s: %w", method, path, err))
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return failed(fmt.Errorf("%s %s: read reply: %w", method, path, err))
	}
	out := response{Status: res.StatusCode, Raw: raw}
	_ = json.Unmarshal(raw, &out.Body)
	return out
}

// failed is the response of a request that got no reply.
func failed(err error) response {
	return response{Err: err, Raw: []byte(err.Error()), Body: map[string]any{}}
}

// expect fails the test unless the reply has the status.
func (r response) expect(t *testing.T, status int) response {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("no reply (want status %d): %v", status, r.Err)
	}
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Raw)
	}
	return r
}

// errorCode is the "error" field of an error reply.
func (r response) errorCode() string { s, _ := r.Body["error"].(string); return s }

// message is the "message" field of an error reply.
func (r response) message() string { s, _ := r.Body["message"].(string); return s }
