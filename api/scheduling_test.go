package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
)

func TestSchedulingRESTPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	settings := map[string]any{"weight": 4, "max_running_turns": 2}
	tests := []struct {
		name, method, path, who string
		status                  int
	}{
		{"organization admin reads its organization", "GET", "/api/v1/organizations/acme/scheduling", "admin", 200},
		{"project engineer reads its organization", "GET", "/api/v1/organizations/acme/scheduling", "engineer", 200},
		{"another organization's admin reads acme", "GET", "/api/v1/organizations/acme/scheduling", "outsider", 404},
		{"no token", "GET", "/api/v1/organizations/acme/scheduling", "", 401},
		{"platform admin sets an organization's weight", "PUT", "/api/v1/organizations/acme/scheduling", "platform", 200},
		{"organization admin may not set its organization's", "PUT", "/api/v1/organizations/acme/scheduling", "admin", 403},
		{"engineer may not set an organization's", "PUT", "/api/v1/organizations/acme/scheduling", "engineer", 403},
		{"another organization's admin sets acme", "PUT", "/api/v1/organizations/acme/scheduling", "outsider", 404},
		{"no such organization", "PUT", "/api/v1/organizations/nope/scheduling", "platform", 404},
		{"viewer reads a project", "GET", "/api/v1/projects/WEB/scheduling", "viewer", 200},
		{"another organization's project", "GET", "/api/v1/projects/GLX/scheduling", "admin", 404},
		{"organization admin sets a project's weight", "PUT", "/api/v1/projects/WEB/scheduling", "admin", 200},
		{"platform admin sets a project's weight", "PUT", "/api/v1/projects/GLX/scheduling", "platform", 200},
		{"engineer may not set a project's", "PUT", "/api/v1/projects/WEB/scheduling", "engineer", 403},
		{"organization admin sets another organization's project", "PUT", "/api/v1/projects/GLX/scheduling", "admin", 404},
		{"platform admin reads the backlog", "GET", "/api/v1/planner/backlog", "platform", 200},
		{"organization admin may not read the backlog", "GET", "/api/v1/planner/backlog", "admin", 403},
		{"engineer may not read the backlog", "GET", "/api/v1/planner/backlog", "engineer", 403},
		{"backlog without a token", "GET", "/api/v1/planner/backlog", "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var body any
			if tt.method == "PUT" {
				body = settings
			}
			r := e.do(tt.method, tt.path, tt.who, body).expect(t, tt.status)
			if tt.status != 200 || strings.HasSuffix(tt.path, "/backlog") {
				return
			}
			if w, _ := r.Body["weight"].(float64); w < 1 {
				t.Errorf("reply %s", r.Raw)
			}
			if tt.method == "PUT" && (r.Body["weight"] != 4.0 || r.Body["max_running_turns"] != 2.0 ||
				r.Body["max_running_turns_per_human"] != nil) {
				t.Errorf("reply %s", r.Raw)
			}
		})
	}
}

// TestSchedulingRESTShapes: an organization's reply has every field, a
// project's has no max_queued_turns; nulls are the defaults.
func TestSchedulingRESTShapes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct{ path, want string }{
		{"/api/v1/organizations/acme/scheduling", `{"weight":1,"max_running_turns":null,"max_running_turns_per_human":null,"max_queued_turns":null}`},
		{"/api/v1/projects/WEB/scheduling", `{"weight":1,"max_running_turns":null,"max_running_turns_per_human":null}`},
	} {
		if r := e.do("GET", tc.path, "platform", nil).expect(t, 200); string(r.Raw) != tc.want {
			t.Errorf("GET %s = %s, want %s", tc.path, r.Raw, tc.want)
		}
	}
	r := e.do("PUT", "/api/v1/organizations/acme/scheduling", "platform",
		`{"weight":10,"max_running_turns":0,"max_running_turns_per_human":3,"max_queued_turns":500}`).expect(t, 200)
	if want := `{"weight":10,"max_running_turns":0,"max_running_turns_per_human":3,"max_queued_turns":500}`; string(r.Raw) != want {
		t.Errorf("PUT = %s, want %s", r.Raw, want)
	}
}

// TestSchedulingRESTBadInput: each bad body is 400 naming the field, and
// nothing is written.
func TestSchedulingRESTBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const org, project = "/api/v1/organizations/acme/scheduling", "/api/v1/projects/WEB/scheduling"
	before := map[string]string{
		org:     string(e.do("PUT", org, "platform", `{"weight":2,"max_queued_turns":40}`).expect(t, 200).Raw),
		project: string(e.do("PUT", project, "admin", `{"weight":3,"max_running_turns":5}`).expect(t, 200).Raw),
	}
	tests := []struct {
		name, path, body, field string
	}{
		{"weight left out", org, `{"max_running_turns":1}`, "weight"},
		{"weight 0", org, `{"weight":0}`, "weight"},
		{"weight over 1000", project, `{"weight":1001}`, "weight"},
		{"weight as a string", org, `{"weight":"3"}`, "weight"},
		{"negative cap", org, `{"weight":1,"max_running_turns":-1}`, "max_running_turns"},
		{"cap over 100000", project, `{"weight":1,"max_running_turns_per_human":100001}`, "max_running_turns_per_human"},
		{"negative queued cap", org, `{"weight":1,"max_queued_turns":-5}`, "max_queued_turns"},
		{"a project's queued cap", project, `{"weight":1,"max_queued_turns":10}`, "max_queued_turns"},
		{"unknown field", org, `{"weight":1,"max_running":3}`, "max_running"},
		{"fractional cap", project, `{"weight":1,"max_running_turns":1.5}`, "max_running_turns"},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := e.do("PUT", tt.path, "platform", tt.body).expect(t, 400)
				if r.errorCode() != "invalid_argument" || !strings.Contains(r.message(), tt.field) {
					t.Errorf("reply %s; want invalid_argument naming %s", r.Raw, tt.field)
				}
			})
		}
	})
	for path, want := range before {
		if got := e.do("GET", path, "platform", nil).expect(t, 200).Raw; string(got) != want {
			t.Errorf("GET %s = %s after refused writes, want %s", path, got, want)
		}
	}
}

// TestSchedulingRESTNotifies: a PUT tells the dispatcher, on its channel,
// to reload weights and caps.
func TestSchedulingRESTNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, e.db.Pool().Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "LISTEN "+store.DispatchChannel); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, who string }{
		{"/api/v1/organizations/acme/scheduling", "platform"},
		{"/api/v1/projects/WEB/scheduling", "admin"},
	} {
		e.do("PUT", tc.path, tc.who, `{"weight":6}`).expect(t, 200)
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if err != nil {
			t.Fatalf("PUT %s: no notification: %v", tc.path, err)
		}
		if n.Channel != store.DispatchChannel || n.Payload != `{"k":"w"}` {
			t.Fatalf("PUT %s: notification %s %q", tc.path, n.Channel, n.Payload)
		}
	}
}

// TestPlannerBacklogREST: a session's first turn, held back with no
// dispatcher running, counts as ready; its second as waiting.
func TestPlannerBacklogREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	p, err := e.db.Principal(ctx, "engineer@example.com")
	if err != nil {
		t.Fatal(err)
	}
	eng := store.HumanCaller(p)
	sess, err := e.db.CreateSession(ctx, eng, "WEB", "backlog")
	if err != nil {
		t.Fatal(err)
	}
	empty := e.do("GET", "/api/v1/planner/backlog", "platform", nil).expect(t, 200)
	if string(empty.Raw) != `{"items":[]}` {
		t.Errorf("empty backlog %s", empty.Raw)
	}
	for _, text := range []string{"first", "second"} {
		if _, err := e.db.SendMessage(ctx, eng, sess.ID, text, "", store.QueueLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	r := e.do("GET", "/api/v1/planner/backlog", "platform", nil).expect(t, 200)
	var b store.Backlog
	if err := json.Unmarshal(r.Raw, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Items) != 1 || b.Items[0].Key != "acme" || len(b.Items[0].Projects) != 1 || b.Items[0].Projects[0].Key != "WEB" {
		t.Fatalf("backlog %s", r.Raw)
	}
	for _, c := range []store.BacklogCounts{b.Items[0].BacklogCounts, b.Items[0].Projects[0].BacklogCounts} {
		if c.Ready != 1 || c.Waiting != 1 || c.InFlight != 0 || c.Running != 0 || c.OldestReadySeconds < 0 {
			t.Errorf("counts %+v in %s", c, r.Raw)
		}
	}
	for _, field := range []string{`"ready":1`, `"waiting":1`, `"in_flight":0`, `"running":0`, `"oldest_ready_seconds":`, `"weight":1`, `"projects":[`} {
		if !strings.Contains(string(r.Raw), field) {
			t.Errorf("reply lacks %s: %s", field, r.Raw)
		}
	}
}
