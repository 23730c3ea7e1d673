package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/tasks"
)

// logBuffer is a slog JSON sink the server writes to from many goroutines.
type logBuffer struct{ logtest.Buffer }

// accessLines are the access log's records of path.
func (b *logBuffer) accessLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	return b.Find(t, "request", map[string]string{"path": path})
}

// withLog makes the api log JSON to b, at info.
func withLog(b *logBuffer) depsOption {
	return func(_ *testing.T, d *api.Deps, _ string) {
		d.Log = slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logBuffer{}
	e.restart(t, withLog(logs), withLimits(10))
	tests := []struct {
		name    string
		path    string
		who     string
		id      string // sent as X-Request-Id; "" sends none
		kept    bool   // the id is kept, not replaced
		status  int
		route   string
		subject string
	}{
		{"an id of the caller's is kept", "/api/v1/projects/WEB/planner/sessions", "viewer", "trace-1:a.b_C", true,
			200, "/api/v1/projects/:project/planner/sessions", "viewer@example.com"},
		{"no id: one is made", "/api/v1/projects/WEB/planner/sessions?limit=5", "viewer", "", false,
			200, "/api/v1/projects/:project/planner/sessions", "viewer@example.com"},
		{"too long: replaced", "/api/v1/projects/WEB/planner/sessions", "viewer", strings.Repeat("a", 129), false, 200,
			"/api/v1/projects/:project/planner/sessions", "viewer@example.com"},
		{"a control character: replaced", "/api/v1/projects/WEB/planner/sessions", "", "abc\tdef", false, 401, "", ""},
		{"not ascii: replaced", "/api/v1/planner/sessions/00000000-0000-0000-0000-000000000000", "viewer", "idé", false, 404,
			"/api/v1/planner/sessions/:session", "viewer@example.com"},
		{"a header injection: replaced", "/healthz", "", "a\r\nX-Evil: 1", false, 200, "/healthz", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case its own path, so that its line is found by path.
			path := tt.path
			if i > 0 && !strings.Contains(path, "?") && tt.path != "/healthz" {
				path += "?case=" + string(rune('a'+i))
			}
			req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.id != "" {
				req.Header[requestid.Header] = []string{tt.id}
			}
			if tt.who != "" {
				req.Header.Set("Authorization", "Bearer "+e.tokens[tt.who])
			}
			res, err := http.DefaultClient.Do(req)
			if strings.ContainsAny(tt.id, "\r\n") && err != nil {
				return // the client itself refuses to send it
			}
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			got := res.Header.Get(requestid.Header)
			switch {
			case tt.kept && got != tt.id:
				t.Fatalf("X-Request-Id %q, want the caller's %q", got, tt.id)
			case !tt.kept && (got == tt.id || !strings.HasPrefix(got, "req_") || len(got) != 28):
				t.Fatalf("X-Request-Id %q, want a new id", got)
			}
			lines := logs.accessLines(t, strings.SplitN(path, "?", 2)[0])
			var line map[string]any
			for _, l := range lines {
				if l["request_id"] == got {
					line = l
				}
			}
			if line == nil {
				t.Fatalf("no access log line with request_id %q among %v", got, lines)
			}
			if line["level"] != "INFO" || line["method"] != "GET" || line["status"] != float64(tt.status) {
				t.Errorf("line %v: want INFO, GET, %d", line, tt.status)
			}
			if tt.route != "" && line["route"] != tt.route {
				t.Errorf("route %v, want %q", line["route"], tt.route)
			}
			if ms, ok := line["took_ms"].(float64); !ok || ms < 0 || ms > float64(time.Minute/time.Millisecond) {
				t.Errorf("took_ms %v, want milliseconds as a number", line["took_ms"])
			}
			if b, ok := line["bytes"].(float64); !ok || b <= 0 {
				t.Errorf("bytes %v, want the body's length", line["bytes"])
			}
			if r, _ := line["remote"].(string); r != "127.0.0.1" {
				t.Errorf("remote %q", r)
			}
			if s, _ := line["subject"].(string); s != tt.subject {
				t.Errorf("subject %q, want %q", s, tt.subject)
			}
		})
	}
}

func TestAccessLogProbesAtDebug(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logBuffer{}
	e.restart(t, withLog(logs))
	e.do("GET", "/readyz", "", nil)
	e.do("GET", "/api/v1/nothing-here", "", nil)
	if n := len(logs.accessLines(t, "/readyz")); n != 0 {
		t.Errorf("%d info lines for /readyz, want none (probes log at debug)", n)
	}
	if n := len(logs.accessLines(t, "/api/v1/nothing-here")); n != 1 {
		t.Errorf("%d lines for an unknown path, want 1", n)
	}
}

// TestAccessLogWebsocket: a /rpc socket is logged once, at its upgrade,
// however many frames it carries.
func TestAccessLogWebsocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logBuffer{}
	e.restart(t, withLog(logs))
	d := websocket.Dialer{Subprotocols: []string{api.SubprotocolJSON}, HandshakeTimeout: 10 * time.Second}
	ws, res, err := d.Dial("ws://"+e.srv.Addr()+"/rpc", http.Header{requestid.Header: {"ws-1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if got := res.Header.Get(requestid.Header); got != "ws-1" {
		t.Errorf("upgrade's X-Request-Id %q, want ws-1", got)
	}
	for i := range 3 {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"no.such"}`)); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if _, _, err := ws.ReadMessage(); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
	}
	lines := logs.accessLines(t, "/rpc")
	if len(lines) != 1 || lines[0]["status"] != float64(http.StatusSwitchingProtocols) || lines[0]["request_id"] != "ws-1" {
		t.Fatalf("access lines of /rpc %v, want one of status 101 with request_id ws-1", lines)
	}
}

// TestSendCarriesRequestID: a sent turn keeps the send's request id for
// its task (the dispatcher's and the worker's side is
// worker.TestRequestIDReachesGateway).
func TestSendCarriesRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var q *tasks.Queue
	e.restart(t, withLimits(10), func(_ *testing.T, d *api.Deps, ns string) {
		q = tasks.NewQueue(d.Redis, tasks.Names{Namespace: ns}, time.Minute)
		t.Cleanup(q.Close)
	})
	sess := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "ids"}).expect(t, 201)
	id, _ := sess.Body["id"].(string)
	req, err := http.NewRequest("POST", "http://"+e.srv.Addr()+"/api/v1/planner/sessions/"+id+"/messages",
		strings.NewReader(`{"text":"plan it"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.tokens["engineer"])
	req.Header.Set(requestid.Header, "send-42")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d", res.StatusCode)
	}
	// No dispatcher runs here, so the turn waits ready: it keeps the
	// request id for the task the dispatcher enqueues.
	var stored string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT request_id FROM planner_turns WHERE session_id = $1`,
		id).Scan(&stored); err != nil || stored != "send-42" {
		t.Fatalf("turn's request id %q (%v), want send-42", stored, err)
	}
	if pending, err := q.Inspector().ListPendingTasks(q.Names().Queue()); err == nil && len(pending) != 0 {
		t.Fatalf("pending tasks %v: a ready turn waits for the dispatcher", pending)
	}
}
