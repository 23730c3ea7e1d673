package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// schedulingFixture is a database of the test's own with organization
// acme and its project WEB, and the environment pointing ballet at it.
func schedulingFixture(t *testing.T) (*store.DB, []string) {
	t.Helper()
	url := storetest.URL(t)
	cfg := store.DefaultConfig()
	cfg.URL = url
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	ctx := context.Background()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateProject(ctx, org.ID, "WEB", "Web", store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	return db, []string{"BALLET_DATABASE_URL=" + url}
}

// TestAdminScheduling runs `ballet admin scheduling` command lines in
// order: each prints the settings it leaves, a refused one exits non-zero
// and changes nothing.
func TestAdminScheduling(t *testing.T) {
	t.Parallel()
	db, env := schedulingFixture(t)
	steps := []struct {
		name   string
		args   []string
		code   int
		stdout []string // lines (or JSON) expected on stdout
		stderr string
	}{
		{"print the organization's defaults", []string{"org", "acme"}, 0,
			[]string{`^organization\s+acme$`, `^weight\s+1$`, `^max_running_turns\s+default$`, `^max_queued_turns\s+default$`}, ""},
		{"set the organization's weight and caps", []string{"org", "acme", "--weight", "3", "--max-running", "0", "--max-queued", "50"}, 0,
			[]string{`^weight\s+3$`, `^max_running_turns\s+0 \(no cap\)$`, `^max_running_turns_per_human\s+default$`, `^max_queued_turns\s+50$`}, ""},
		{"flags not given keep their value", []string{"org", "acme", "--max-queued", "default", "--json"}, 0,
			[]string{`^\{"weight":3,"max_running_turns":0,"max_running_turns_per_human":null,"max_queued_turns":null\}$`}, ""},
		{"set a project's cap", []string{"project", "WEB", "--max-running-per-human", "2", "--json"}, 0,
			[]string{`^\{"weight":1,"max_running_turns":null,"max_running_turns_per_human":2\}$`}, ""},
		{"weight out of range", []string{"org", "acme", "--weight", "1001"}, 1, nil, "weight: must be 1-1000, got 1001"},
		{"negative cap", []string{"project", "WEB", "--max-running", "-1"}, 1, nil, "max_running_turns: must be 0 (no cap)"},
		{"cap that is not a number", []string{"org", "acme", "--max-running", "many"}, 2, nil, `invalid argument "many" for "--max-running"`},
		{"a project has no queued cap", []string{"project", "WEB", "--max-queued", "3"}, 2, nil, "unknown flag: --max-queued"},
		{"no key", []string{"org"}, 2, nil, "needs the organization's KEY"},
		{"an argument too many", []string{"project", "WEB", "extra"}, 2, nil, `unknown argument "extra"`},
		{"no such organization", []string{"org", "nope"}, 1, nil, `organization "nope" not found`},
	}
	for _, st := range steps {
		out, stderr, code := ballet(t, env, append([]string{"admin", "scheduling"}, st.args...)...)
		if code != st.code || !strings.Contains(stderr, st.stderr) {
			t.Fatalf("%s: exit %d, stderr %q; want %d and %q", st.name, code, stderr, st.code, st.stderr)
		}
		for _, re := range st.stdout {
			if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
				t.Errorf("%s: stdout lacks %s:\n%s", st.name, re, out)
			}
		}
	}
	// The refused lines wrote nothing.
	caller := seedCaller()
	org, err := db.OrganizationScheduling(context.Background(), caller, "acme")
	if err != nil {
		t.Fatal(err)
	}
	project, err := db.ProjectScheduling(context.Background(), caller, "WEB")
	if err != nil {
		t.Fatal(err)
	}
	if org.Weight != 3 || org.MaxRunningTurns == nil || *org.MaxRunningTurns != 0 || org.MaxQueuedTurns != nil ||
		project.Weight != 1 || project.MaxRunningTurns != nil || project.MaxRunningTurnsPerHuman == nil || *project.MaxRunningTurnsPerHuman != 2 {
		t.Errorf("stored %+v and %+v", org, project)
	}
}

// TestAdminBacklog: a session's first turn, held back with no dispatcher,
// is ready in the table and the JSON; the second waits.
func TestAdminBacklog(t *testing.T) {
	t.Parallel()
	db, env := schedulingFixture(t)
	out, stderr, code := ballet(t, env, "admin", "backlog")
	if code != 0 || strings.TrimSpace(out) != "no open planner turns" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	ctx := context.Background()
	if _, err := db.CreateRoleBinding(ctx, "eng@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: mustOrg(t, db, "acme")}, store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	p, err := db.Principal(ctx, "eng@example.com")
	if err != nil {
		t.Fatal(err)
	}
	eng := store.HumanCaller(p)
	sess, err := db.CreateSession(ctx, eng, "WEB", "backlog")
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"first", "second"} {
		if _, err := db.SendMessage(ctx, eng, sess.ID, text, "", store.QueueLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, code = ballet(t, env, "admin", "backlog")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`^ORGANIZATION\s+PROJECT\s+WEIGHT\s+READY\s+WAITING\s+IN FLIGHT\s+RUNNING\s+OLDEST READY$`,
		`^acme\s+1\s+1\s+1\s+0\s+0\s+\d+\.\ds$`,
		`^\s+WEB\s+1\s+1\s+1\s+0\s+0\s+\d+\.\ds$`,
	} {
		if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
			t.Errorf("table lacks %s:\n%s", re, out)
		}
	}
	out, stderr, code = ballet(t, env, "admin", "backlog", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var b store.Backlog
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if len(b.Items) != 1 || len(b.Items[0].Projects) != 1 || b.Items[0].Ready != 1 || b.Items[0].Waiting != 1 ||
		b.Items[0].Projects[0].Key != "WEB" || b.Items[0].Projects[0].Ready != 1 {
		t.Errorf("backlog %s", out)
	}
}

func mustOrg(t *testing.T, db *store.DB, key string) string {
	t.Helper()
	o, err := db.OrganizationByKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return o.ID
}
