package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// runDemoJSON runs `ballet demo --json` and decodes its one JSON object,
// refusing any other key or trailing output.
func runDemoJSON(t *testing.T, env []string) demoResult {
	t.Helper()
	out, stderr, code := ballet(t, env, "demo", "--json")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s", code, stderr)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatalf("demo printed %q: %v", out, err)
	}
	if len(keys) != 4 {
		t.Fatalf("demo printed keys %v, want organization, project, subject and token", keys)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var res demoResult
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("demo printed %q: %v", out, err)
	}
	if dec.More() {
		t.Fatalf("demo printed more than one JSON object: %q", out)
	}
	return res
}

// openURL opens the test's database, closed when the test ends.
func openURL(t *testing.T, url string) *store.DB {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.URL = url
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

func counts(t *testing.T, db *store.DB) (items, deps, events int) {
	t.Helper()
	err := db.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM dependencies),
		(SELECT count(*) FROM events)`).Scan(&items, &deps, &events)
	if err != nil {
		t.Fatal(err)
	}
	return items, deps, events
}

func TestDemoIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	env := []string{"BALLET_DATABASE_URL=" + url}

	first := runDemoJSON(t, env)
	want := demoResult{Organization: "demo", Project: "DEMO", Subject: "demo@example.com", Token: first.Token}
	if first != want || first.Token == "" {
		t.Fatalf("demo = %+v, want %+v with a token", first, want)
	}
	db := openURL(t, url)
	items1, deps1, events1 := counts(t, db)

	// The demo human: engineer on DEMO, and the token is theirs.
	p, err := db.Principal(ctx, "demo@example.com")
	if err != nil {
		t.Fatal(err)
	}
	proj, err := db.ProjectByKey(ctx, "DEMO")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Bindings, func(b store.RoleBinding) bool {
		return b.Role == store.RoleEngineer && b.Scope.Kind == store.ScopeProject && b.Scope.ProjectID == proj.ID
	}) {
		t.Fatalf("demo@example.com bindings = %+v, want engineer on DEMO", p.Bindings)
	}
	if subject, err := db.AuthenticateToken(ctx, first.Token); err != nil || subject != "demo@example.com" {
		t.Fatalf("token authenticates %q, %v", subject, err)
	}
	human := store.HumanCaller(p)

	// The plan: every kind, tickets in several states, blocks edges, some
	// ready tickets runnable and some blocked.
	items, err := db.ListItems(ctx, human, "DEMO", store.ItemFilter{})
	if err != nil {
		t.Fatal(err)
	}
	kinds, states := map[string]int{}, map[string]int{}
	ready := 0
	for _, it := range items {
		kinds[it.Kind]++
		if it.Kind == store.KindTicket {
			states[it.State]++
			if it.State == store.StateReady {
				ready++
			}
		}
	}
	for _, k := range []string{store.KindMilestone, store.KindEpic, store.KindTicket} {
		if kinds[k] == 0 {
			t.Errorf("no %s in DEMO", k)
		}
	}
	for _, s := range []string{store.StateBacklog, store.StateReady, store.StateInProgress, store.StatePaused, store.StateDone, store.StateCancelled} {
		if states[s] == 0 {
			t.Errorf("no ticket in %s; states = %v", s, states)
		}
	}
	if !slices.ContainsFunc(items, func(it store.Item) bool {
		return it.Kind == store.KindEpic && strings.Contains(strings.ToLower(it.Title), "sign-in")
	}) {
		t.Error("no sign-in epic for the demo conversation about password reset")
	}
	var blocks int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM dependencies WHERE type = 'blocks'`).Scan(&blocks); err != nil {
		t.Fatal(err)
	}
	if blocks == 0 {
		t.Error("no blocks dependencies")
	}
	runnable, err := db.Runnable(ctx, human, "DEMO")
	if err != nil {
		t.Fatal(err)
	}
	if len(runnable) == 0 || len(runnable) >= ready {
		t.Errorf("%d runnable of %d ready tickets; want some runnable and some blocked", len(runnable), ready)
	}

	// The planner skill, as the planner reads it in DEMO.
	sk, err := db.ResolveSkill(ctx, human, "DEMO", "planner")
	if err != nil {
		t.Fatal(err)
	}
	if sk.ResolvedVersion < 1 || !strings.Contains(sk.Body, "acceptance criteria") {
		t.Errorf("planner skill = version %d, body %.80q", sk.ResolvedVersion, sk.Body)
	}

	// Knowledge of each of the kinds the demo promises.
	entries, err := db.ListKnowledge(ctx, human, "demo", store.KnowledgeFilter{Project: "DEMO"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{store.KnowledgeDecision, store.KnowledgeDocument, store.KnowledgeNote} {
		if !slices.ContainsFunc(entries, func(k store.KnowledgeEntry) bool { return k.Kind == kind }) {
			t.Errorf("no %s knowledge entry linked to DEMO", kind)
		}
	}

	// Every write was recorded as the system's event.
	var others int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM events WHERE actor_kind <> 'system'`).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if events1 == 0 || others != 0 {
		t.Errorf("%d events, %d not by the system", events1, others)
	}

	// Again: the same answer but a new token, and nothing else written.
	second := runDemoJSON(t, env)
	if second.Token == first.Token || second.Token == "" {
		t.Errorf("second token %q, first %q: want a new one", second.Token, first.Token)
	}
	second.Token = first.Token
	if second != first {
		t.Errorf("second run = %+v, first %+v", second, first)
	}
	items2, deps2, events2 := counts(t, db)
	if items2 != items1 || deps2 != deps1 || events2 != events1 {
		t.Errorf("second run changed counts: items %d→%d, dependencies %d→%d, events %d→%d",
			items1, items2, deps1, deps2, events1, events2)
	}
}

func TestDemoHumanOutput(t *testing.T) {
	t.Parallel()
	env := []string{"BALLET_DATABASE_URL=" + storetest.URL(t)}
	out, stderr, code := ballet(t, env, "demo")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"organization: demo", "project:      DEMO", "subject:      demo@example.com", "token:        " + store.TokenPrefix} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if json.Valid(bytes.TrimSpace([]byte(out))) {
		t.Errorf("without --json the output is JSON: %s", out)
	}
}
