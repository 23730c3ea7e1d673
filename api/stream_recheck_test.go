package api_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// watcher is one subject's open watch, event stream and outputs event
// stream, each on a connection of its own.
type watcher struct {
	watch, stream *rawConn
	sse           *bufio.Reader
}

// watchAll opens a planner.watch of the env's session, a stream of its
// project and the session's outputs event stream with token.
func watchAll(t *testing.T, e *rpcEnv, proto, token string) watcher {
	t.Helper()
	auth := func(c *rawConn) {
		if code, msg := rpcErr(c.call(t, 1, "auth", map[string]any{"token": token})); code != 0 {
			t.Fatalf("auth: %d %s", code, msg)
		}
	}
	w := watcher{watch: e.mustRaw(t, proto), stream: e.mustRaw(t, proto)}
	auth(w.watch)
	if code, msg := rpcErr(w.watch.call(t, 2, "planner.watch", map[string]any{"subscription": "w", "session": e.session})); code != 0 {
		t.Fatalf("planner.watch: %d %s", code, msg)
	}
	auth(w.stream)
	subscribeOK(t, w.stream, 2, map[string]any{"subscription": "s", "stream": "project:WEB"})
	req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+"/api/v1/planner/sessions/"+e.session+"/outputs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: storetest.WaitTimeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	if res.StatusCode != 200 {
		t.Fatalf("outputs stream: status %d", res.StatusCode)
	}
	w.sse = bufio.NewReader(res.Body)
	return w
}

// sseClosed reads the outputs event stream until its closed event and
// returns that event's data; the client's timeout ends a stream that stays
// open.
func sseClosed(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	closed := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("outputs stream ended without a closed event: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "event: closed":
			closed = true
		case closed && strings.HasPrefix(line, "data: "):
			return strings.TrimPrefix(line, "data: ")
		}
	}
}

// revocation is a way a subject loses access, and the reason its streams
// then end with.
type revocation struct {
	name   string
	revoke func(t *testing.T, subject, binding, tokenID string)
	reason string
}

// viewerOfWEB binds subject as a viewer of the env's project and gives it
// an API token.
func viewerOfWEB(t *testing.T, e *rpcEnv, subject string) (_, bindingID, token, tokenID string) {
	t.Helper()
	ctx := context.Background()
	scope := store.Scope{Kind: store.ScopeProject, OrganizationID: e.org.ID, ProjectID: e.project.ID}
	b, err := e.db.CreateRoleBinding(ctx, subject, store.RoleViewer, scope, store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	token, tok, err := e.db.CreateAPIToken(ctx, subject, "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return subject, b.ID, token, tok.ID
}

func revocations(e *rpcEnv) []revocation {
	return []revocation{
		{"role binding deleted", func(t *testing.T, _, binding, _ string) {
			e.do("DELETE", "/api/v1/role-bindings/"+binding, "admin", nil).expect(t, 204)
		}, "not_found"}, // as a new watch would answer: the project is not visible any more
		{"token revoked", func(t *testing.T, subject, _, tokenID string) {
			if err := e.db.RevokeAPIToken(context.Background(), subject, tokenID); err != nil {
				t.Fatal(err)
			}
		}, "unauthenticated"},
	}
}

// TestStreamsEndWhenAccessGoes: a planner.watch, a stream.subscribe and an
// outputs event stream end within server.stream_recheck once their token
// is revoked (unauthenticated) or their role binding deleted (not_found,
// as a new watch would answer), saying why; a watcher whose access stays
// keeps receiving.
func TestStreamsEndWhenAccessGoes(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) {
		c.StreamRecheck = 50 * time.Millisecond
		c.RPCHeartbeat = time.Hour // the raw sockets answer no $/heartbeat while the test waits
	})
	ctx := context.Background()
	scope := store.Scope{Kind: store.ScopeProject, OrganizationID: e.org.ID, ProjectID: e.project.ID}
	stays := watchAll(t, e, both[0], e.tokens["viewer"])
	for _, tt := range revocations(e) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			subject, bindingID, token, tokenID := viewerOfWEB(t, e, "watcher-"+strings.ReplaceAll(tt.name, " ", "-")+"@example.com")
			w := watchAll(t, e, both[len(both)-1], token)
			tt.revoke(t, subject, bindingID, tokenID)
			if p := w.watch.nextEvent(t, "stream.closed", "w", nil); p["reason"] != tt.reason {
				t.Errorf("planner.watch closed with %v, want reason %s", p, tt.reason)
			}
			if p := w.stream.nextEvent(t, "stream.closed", "s", nil); p["reason"] != tt.reason {
				t.Errorf("stream closed with %v, want reason %s", p, tt.reason)
			}
			if got, want := sseClosed(t, w.sse), `{"reason":"`+tt.reason+`"}`; got != want {
				t.Errorf("outputs stream closed with %s, want %s", got, want)
			}
		})
	}
	t.Run("a revoked token under many watches", func(t *testing.T) {
		t.Parallel()
		subject := "many-watches@example.com"
		if _, err := e.db.CreateRoleBinding(ctx, subject, store.RoleViewer, scope, store.SystemActor()); err != nil {
			t.Fatal(err)
		}
		token, tok, err := e.db.CreateAPIToken(ctx, subject, "old", 0)
		if err != nil {
			t.Fatal(err)
		}
		const sockets = 25 // beyond auth.failure_burst (20): one failed check each
		conns := make([]*rawConn, sockets)
		for i := range conns {
			conns[i] = e.mustRaw(t, both[0])
			if code, msg := rpcErr(conns[i].call(t, 1, "auth", map[string]any{"token": token})); code != 0 {
				t.Fatalf("auth %d: %d %s", i, code, msg)
			}
			if code, msg := rpcErr(conns[i].call(t, 2, "planner.watch", map[string]any{"subscription": "w", "session": e.session})); code != 0 {
				t.Fatalf("planner.watch %d: %d %s", i, code, msg)
			}
		}
		if err := e.db.RevokeAPIToken(ctx, subject, tok.ID); err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if p := c.nextEvent(t, "stream.closed", "w", nil); p["reason"] != "unauthenticated" {
				t.Fatalf("closed with %v, want unauthenticated", p)
			}
		}
		// The server's rechecks counted no failed authentication: a new
		// token from the same address is taken at once.
		fresh, _, err := e.db.CreateAPIToken(ctx, subject, "new", 0)
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := rpcErr(e.mustRaw(t, both[0]).call(t, 1, "auth", map[string]any{"token": fresh})); code != 0 {
			t.Fatalf("auth with a new token after the rechecks: %d %s", code, msg)
		}
	})
	t.Cleanup(func() {
		// After both: the viewer's watch and stream still deliver.
		e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer",
			map[string]any{"text": "still there?"}).expect(t, 202)
		if p := stays.watch.nextEvent(t, "planner.output", "w", nil); p["type"] != "queued" {
			t.Errorf("the viewer's watch delivered %v, want the queued output", p)
		}
		e.do("POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": "after"}).expect(t, 201)
		for { // after the role bindings' events
			if p := stays.stream.nextEvent(t, "stream.event", "s", nil); p["type"] == "item.created" {
				break
			}
		}
	})
}
