package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestProposeRefusesPolicyBehindTheSchema shows that propose_changeset's
// call refuses a policy by itself, before touching the store, should its
// schema ever admit one.
func TestProposeRefusesPolicyBehindTheSchema(t *testing.T) {
	t.Parallel()
	tool := proposeChangesetTool()
	tool.InputSchema = json.RawMessage(`{"type":"object"}`)
	reg, err := NewRegistry(nil, tool)
	if err != nil {
		t.Fatal(err)
	}
	// No DB: reaching the store would fail the test with an internal error.
	env := engineerEnv()
	for _, in := range []string{
		`{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"t","policy":{"review_mode":"agent"}}}]}`,
		`{"title":"t","operations":[{"kind":"update_item","update":{"item":"WEB-1","policy":{}}}]}`,
		`{"title":"t","policy":null,"operations":[]}`,
	} {
		res := reg.Call(context.Background(), env, "propose_changeset", json.RawMessage(in))
		if !res.IsError || !strings.Contains(res.Text, "may not set a policy") {
			t.Errorf("%s → %+v", in, res)
		}
	}
	// CheckNoPolicy, the store's own rule, agrees.
	p := store.Proposal{Title: "t", Operations: []store.Operation{{Kind: store.OpCreateItem,
		Create: &store.NewItem{Kind: store.KindTicket, Title: "t", Policy: &store.Policy{}}}}}
	if err := p.CheckNoPolicy(); !store.IsCode(err, store.CodeInvalid) {
		t.Fatalf("CheckNoPolicy = %v", err)
	}
}

// engineerEnv is the planner acting for an engineer of project WEB, with
// no database behind it.
func engineerEnv() Env {
	web := store.Project{ID: "p-web", OrganizationID: "o-acme", Key: "WEB"}
	eng := &store.Principal{Subject: "eng@example.com", Kind: "human", Bindings: []store.RoleBinding{{
		Subject: "eng@example.com", Role: store.RoleEngineer,
		Scope: store.Scope{Kind: store.ScopeProject, OrganizationID: web.OrganizationID, ProjectID: web.ID}}}}
	return Env{Project: web, Caller: store.Caller{Principal: eng, Actor: store.PlannerActor("s", eng.Subject)}}
}

func TestClip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		n     int
		want  string
		total int
		cut   bool
	}{
		{"", 3, "", 0, false},
		{"abc", 3, "abc", 3, false},
		{"abcd", 3, "abc", 4, true},
		{"ééé€", 2, "éé", 4, true},
		{"ab", 0, "", 2, true},
	} {
		got, total, cut := clip(tc.in, tc.n)
		if got != tc.want || total != tc.total || cut != tc.cut {
			t.Errorf("clip(%q, %d) = %q, %d, %v", tc.in, tc.n, got, total, cut)
		}
	}
}
