package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// withLimits gives the api a planner whose queues hold at most perProject
// turns of one project.
func withLimits(perProject int) depsOption {
	return func(t *testing.T, d *api.Deps, ns string) {
		names := tasks.Names{Namespace: ns}
		q := tasks.NewQueue(d.Redis, names, time.Minute)
		t.Cleanup(q.Close)
		d.Planner = tasks.NewPlanner(d.DB, q, tasks.NewPublisher(d.Redis, names, d.Log),
			store.QueueLimits{Total: 1000, PerProject: perProject}, d.Log)
	}
}

func (e *env) plannerRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM planner_messages)
		+ (SELECT count(*) FROM planner_turns) + (SELECT count(*) FROM planner_outputs)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPlannerREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.restart(t, withLimits(2))
	r := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "Q3 plan"}).expect(t, 201)
	sess := r.Body["id"].(string)
	if r.Body["project"] != "WEB" || r.Body["created_by"] != "engineer@example.com" || r.Body["running"] != false {
		t.Fatalf("session %s", r.Raw)
	}
	sent := e.do("POST", "/api/v1/planner/sessions/"+sess+"/messages", "engineer", map[string]any{"text": "What is next?"}).expect(t, 202)
	if sent.Body["seq"] != float64(1) || sent.Body["position"] != float64(0) || sent.Body["turn"] == "" {
		t.Fatalf("send %s", sent.Raw)
	}
	second := e.do("POST", "/api/v1/planner/sessions/"+sess+"/messages", "engineer",
		map[string]any{"text": "And after that?", "turn": "5b0c2f0e-8d7c-4a53-9a43-0d1f3a3f0b9e"}).expect(t, 202)
	if second.Body["position"] != float64(1) || second.Body["turn"] != "5b0c2f0e-8d7c-4a53-9a43-0d1f3a3f0b9e" {
		t.Fatalf("second send %s", second.Raw)
	}
	// A retry with the same turn id is not a third turn.
	e.do("POST", "/api/v1/planner/sessions/"+sess+"/messages", "engineer",
		map[string]any{"text": "And after that?", "turn": "5b0c2f0e-8d7c-4a53-9a43-0d1f3a3f0b9e"}).expect(t, 202)

	got := e.do("GET", "/api/v1/planner/sessions/"+sess, "viewer", nil).expect(t, 200)
	if msgs := got.Body["messages"].([]any); len(msgs) != 2 {
		t.Fatalf("messages %s", got.Raw)
	}
	list := e.do("GET", "/api/v1/projects/WEB/planner/sessions", "viewer", nil).expect(t, 200)
	if items := list.Body["items"].([]any); len(items) != 1 {
		t.Fatalf("sessions %s", list.Raw)
	}

	before := e.plannerRows(t)
	refusals := []struct {
		name, who, path string
		body            any
		status          int
		msg             string
	}{
		{"queue full", "engineer", "/messages", map[string]any{"text": "third"}, 429, "already has 2 queued planner turns"},
		{"blank", "engineer", "/messages", map[string]any{"text": "   "}, 400, "text: must not be blank"},
		{"too long", "engineer", "/messages", map[string]any{"text": strings.Repeat("x", 100001)}, 400, "at most 100000"},
		{"unknown field", "engineer", "/messages", `{"text":"hi","session":"x"}`, 400, `unknown field "session"`},
		{"empty turn id", "engineer", "/messages", map[string]any{"text": "hi", "turn": ""}, 400, "turn: must be 1-255 printable ASCII characters, got an empty string"},
		{"turn id of 256", "engineer", "/messages", map[string]any{"text": "hi", "turn": strings.Repeat("k", 256)}, 400, "turn: must be 1-255 printable ASCII characters, got 256 bytes"},
		{"turn id with a tab", "engineer", "/messages", map[string]any{"text": "hi", "turn": "a\tb"}, 400, "got byte 0x09 at offset 1"},
		{"turn id not ASCII", "engineer", "/messages", map[string]any{"text": "hi", "turn": "tür"}, 400, "got byte 0xc3 at offset 1"},
		{"bad multitask", "engineer", "/messages", map[string]any{"text": "hi", "multitask": "rollback"}, 400, `multitask: must be "enqueue", "reject" or "interrupt", got "rollback"`},
		{"viewer", "viewer", "/messages", map[string]any{"text": "hi"}, 403, "tracker.write"},
		{"other organization", "outsider", "/messages", map[string]any{"text": "hi"}, 404, "not found"},
		{"no token", "", "/messages", map[string]any{"text": "hi"}, 401, "bearer"},
		{"cancel unknown turn", "engineer", "/cancel", map[string]any{"turn": "00000000-0000-0000-0000-000000000000"}, 404, "not found"},
		{"outputs bad cursor", "engineer", "/outputs?from_cursor=-1", nil, 400, "from_cursor"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			method := "POST"
			if tt.body == nil {
				method = "GET"
			}
			r := e.do(method, "/api/v1/planner/sessions/"+sess+tt.path, tt.who, tt.body).expect(t, tt.status)
			if !strings.Contains(r.message(), tt.msg) {
				t.Fatalf("message %q does not contain %q", r.message(), tt.msg)
			}
		})
	}
	if after := e.plannerRows(t); after != before {
		t.Fatalf("refusals wrote %d planner rows", after-before)
	}

	// Cancel both queued turns; every one ends with exactly one done.
	c := e.do("POST", "/api/v1/planner/sessions/"+sess+"/cancel", "engineer", nil).expect(t, 200)
	if n := len(c.Body["cancelled"].([]any)); n != 2 {
		t.Fatalf("cancel %s", c.Raw)
	}
	outs := e.do("GET", "/api/v1/planner/sessions/"+sess+"/outputs?from_cursor=0", "viewer", nil).expect(t, 200)
	var types []string
	for i, o := range outs.Body["items"].([]any) {
		m := o.(map[string]any)
		if m["cursor"] != float64(i+1) {
			t.Fatalf("cursor %v at %d", m["cursor"], i)
		}
		text, _ := m["text"].(string)
		types = append(types, m["type"].(string)+":"+text)
	}
	if got := strings.Join(types, ","); got != "queued:,queued:,done:cancelled,done:cancelled" {
		t.Fatalf("outputs %s", got)
	}
	after := e.do("GET", "/api/v1/planner/sessions/"+sess+"/outputs?from_cursor=3", "viewer", nil).expect(t, 200)
	if n := len(after.Body["items"].([]any)); n != 1 {
		t.Fatalf("replay after cursor 3 gave %d outputs", n)
	}
}

func TestMonitoringIsForPlatformAdmins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := taskstest.Config(t)
	conn, err := rc.AsynqConnOpt()
	if err != nil {
		t.Fatal(err)
	}
	mon := api.NewMonitoring(conn)
	t.Cleanup(func() { _ = mon.Close() })
	e.restart(t, func(_ *testing.T, d *api.Deps, _ string) { d.Monitoring = mon })
	for who, status := range map[string]int{"": 401, "engineer": 403, "admin": 403, "platform": 200} {
		if r := e.do("GET", "/monitoring/", who, nil); r.Status != status {
			t.Errorf("%q: %d, want %d", who, r.Status, status)
		}
	}
	// A browser signs in once with ?token=, which becomes a cookie.
	req, _ := http.NewRequest("GET", "http://"+e.srv.Addr()+"/monitoring/?token="+e.tokens["platform"], nil)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || !strings.Contains(res.Header.Get("Set-Cookie"), "ballet_token=") {
		t.Fatalf("sign-in: %d %q", res.StatusCode, res.Header.Get("Set-Cookie"))
	}
}

// TestSendPriority: the REST send takes priority interactive or batch,
// stores it with the turn, and refuses any other value naming the field,
// with nothing written.
func TestSendPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.restart(t, withLimits(10))
	sess := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "p"}).expect(t, 201).Body["id"].(string)
	before := e.plannerRows(t)
	for _, bad := range []any{"urgent", "", "BATCH", 1} {
		if bad == "" {
			continue // "" is the default, interactive
		}
		r := e.do("POST", "/api/v1/planner/sessions/"+sess+"/messages", "engineer", map[string]any{"text": "x", "priority": bad}).expect(t, 400)
		if !strings.Contains(string(r.Raw), "priority") {
			t.Errorf("priority %v refused with %s, want the field named", bad, r.Raw)
		}
	}
	if n := e.plannerRows(t); n != before {
		t.Fatalf("refused sends wrote %d rows", n-before)
	}
	for _, p := range []string{"batch", "interactive"} {
		turn := e.do("POST", "/api/v1/planner/sessions/"+sess+"/messages", "engineer", map[string]any{"text": "x", "priority": p}).expect(t, 202).Body["turn"].(string)
		var stored string
		if err := e.db.Pool().QueryRow(context.Background(), `SELECT priority FROM planner_turns WHERE id = $1`, turn).Scan(&stored); err != nil || stored != p {
			t.Fatalf("turn stored with priority %q (%v), want %s", stored, err, p)
		}
	}
}
