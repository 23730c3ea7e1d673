package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// GET …/turns/{turn} answers the turn; with ?wait= it answers once the turn
// ends, or at the end of the wait with its state then.
func TestTurnWait(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newSSEEnv(t, `
answers:
  - content:
      - text: "Held answer."
    chunk_size: 2
    hold_after: 1
    hold_until: `+release+`
`)
	base := "/api/v1/planner/sessions/" + e.session
	turn := e.do("POST", base+"/messages", "engineer", map[string]any{"text": "hello"}).expect(t, 202).Body["turn"].(string)
	path := base + "/turns/" + turn

	// The wait ends with the turn still open: its state then.
	r := e.do("GET", path+"?wait=100ms", "viewer", nil).expect(t, 200)
	if r.Body["id"] != turn || (r.Body["status"] != "queued" && r.Body["status"] != "running") || r.Body["finished_at"] != nil {
		t.Fatalf("after a short wait: %s", r.Raw)
	}
	// A long wait answers once the turn ends, whenever the hold is released.
	got := make(chan response, 1)
	go func() { got <- e.do("GET", path+"?wait=60s", "viewer", nil) }()
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = (<-got).expect(t, 200)
	if r.Body["status"] != "done" || r.Body["done_reason"] != "end_turn" || r.Body["finished_at"] == nil {
		t.Fatalf("after waiting for the end: %s", r.Raw)
	}
	// An ended turn answers at once, with or without a wait.
	for _, q := range []string{"", "?wait=0s", "?wait=30s"} {
		if r := e.do("GET", path+q, "viewer", nil).expect(t, 200); r.Body["status"] != "done" {
			t.Fatalf("%s: %s", q, r.Raw)
		}
	}

	other := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "other"}).expect(t, 201).Body["id"].(string)
	for _, tt := range []struct {
		name, who, path string
		status          int
		msg             string
	}{
		{"not a duration", "viewer", path + "?wait=soon", 400, `wait: must be a duration from 0s to 1m0s, such as 30s, got "soon"`},
		{"a number without unit", "viewer", path + "?wait=30", 400, `got "30"`},
		{"negative", "viewer", path + "?wait=-1s", 400, `got "-1s"`},
		{"beyond the bound", "viewer", path + "?wait=61s", 400, `got "61s"`},
		{"unknown turn", "viewer", base + "/turns/00000000-0000-0000-0000-000000000000", 404, "not found"},
		{"not a turn id", "viewer", base + "/turns/probe-1", 404, "not found"},
		{"another session's turn", "viewer", "/api/v1/planner/sessions/" + other + "/turns/" + turn, 404, "not found"},
		{"other organization", "outsider", path, 404, "not found"},
		{"no token", "", path, 401, "bearer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", tt.path, tt.who, nil).expect(t, tt.status)
			if !strings.Contains(r.message(), tt.msg) {
				t.Fatalf("message %q does not contain %q", r.message(), tt.msg)
			}
		})
	}
}
