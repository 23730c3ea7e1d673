package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestRegistryEnforcesPermission shows the registry's own gate: a tool runs
// only for a human who holds its permission on the session's project, and
// a refusal is an error result naming the human and the permission, given
// before the tool (and the store behind it) runs at all.
func TestRegistryEnforcesPermission(t *testing.T) {
	t.Parallel()
	eng := engineerEnv()
	viewer := eng
	viewer.Caller.Principal = &store.Principal{Subject: "viewer@example.com", Kind: "human",
		Bindings: []store.RoleBinding{{Role: store.RoleViewer, Scope: eng.Caller.Principal.Bindings[0].Scope}}}
	viewer.Caller.Actor = store.PlannerActor("s", "viewer@example.com")
	stranger := eng
	stranger.Caller.Principal = &store.Principal{Subject: "glx@example.com", Kind: "human",
		Bindings: []store.RoleBinding{{Role: store.RoleEngineer, Scope: store.Scope{Kind: store.ScopeOrganization, OrganizationID: "o-globex"}}}}
	tests := []struct {
		name string
		env  Env
		perm store.Permission
		ran  bool
		want []string
	}{
		{"holder runs", eng, store.PermTrackerWrite, true, nil},
		{"no permission needed", viewer, "", true, nil},
		{"reader runs a read", viewer, store.PermTrackerRead, true, nil},
		{"viewer refused a write", viewer, store.PermTrackerWrite, false,
			[]string{"forbidden: the human you act for (viewer@example.com) may not do this", "needs tracker.write"}},
		{"viewer refused knowledge writes", viewer, store.PermKnowledgeWrite, false,
			[]string{"forbidden: the human you act for (viewer@example.com)", "needs knowledge.write"}},
		{"project-scoped engineer refused organization permissions", eng, store.PermRoleBindingManage, false,
			[]string{"forbidden: the human you act for (eng@example.com)", "needs role_binding.manage"}},
		{"other organization sees no project", stranger, store.PermTrackerRead, false, []string{"not found: project WEB not found"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ran := false
			reg, err := NewRegistry(nil, Tool{
				Definition: Definition{Name: "probe", Description: "Records that it ran.", InputSchema: mustSchema(object(schema{}))},
				Permission: tc.perm,
				Call: func(context.Context, Env, json.RawMessage) (any, error) {
					ran = true
					return map[string]bool{"ran": true}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			res := reg.Call(context.Background(), tc.env, "probe", json.RawMessage(`{}`))
			if ran != tc.ran || res.IsError == tc.ran {
				t.Fatalf("ran = %v, result %+v; want ran = %v", ran, res, tc.ran)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Text, w) {
					t.Errorf("result %s does not say %q", res.Text, w)
				}
			}
		})
	}
}

// TestViewerProposalRefusedBeforeTheStore calls the real propose_changeset
// for a viewer with no database behind the registry: without the
// registry's gate the call reaches the store and fails internally.
func TestViewerProposalRefusedBeforeTheStore(t *testing.T) {
	t.Parallel()
	reg, err := Planner(nil)
	if err != nil {
		t.Fatal(err)
	}
	env := engineerEnv()
	env.Caller.Principal = &store.Principal{Subject: "viewer@example.com", Kind: "human",
		Bindings: []store.RoleBinding{{Role: store.RoleViewer, Scope: env.Caller.Principal.Bindings[0].Scope}}}
	for name, in := range map[string]string{
		"propose_changeset": `{"title":"x","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"t"}}]}`,
		"create_knowledge":  `{"kind":"note","title":"n","body":"b"}`,
		"update_knowledge":  `{"id":"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11","version":1,"title":"hijacked"}`,
	} {
		res := reg.Call(context.Background(), env, name, json.RawMessage(in))
		if !res.IsError || !strings.Contains(res.Text, "forbidden: the human you act for (viewer@example.com) may not do this") {
			t.Errorf("%s → %+v", name, res)
		}
	}
}

// TestEveryPlannerToolNamesItsPermission keeps the gate in front of all
// twelve tools: a tool without a permission would run for anyone.
func TestEveryPlannerToolNamesItsPermission(t *testing.T) {
	t.Parallel()
	for _, tool := range plannerTools() {
		if tool.Permission == "" {
			t.Errorf("%s has no permission", tool.Name)
		}
	}
}
