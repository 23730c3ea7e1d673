package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestLinkingAnUnreadableItemLooksUnknown: an item of a project the caller
// cannot read (another project of its organization, or another
// organization) is answered exactly like a key that does not exist, when it
// is linked by a dependency or named in a changeset.
func TestLinkingAnUnreadableItemLooksUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	web := f.create(t, store.NewItem{Kind: store.KindTicket}).Key
	web2 := f.create(t, store.NewItem{Kind: store.KindTicket}).Key
	ops, err := f.db.CreateProject(ctx, f.org.ID, "OPS", "Ops", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	admin := store.HumanCaller(&store.Principal{Subject: "root", Kind: store.ActorHuman, Bindings: []store.RoleBinding{
		{Subject: "root", Role: store.RolePlatformAdmin, Scope: store.Scope{Kind: store.ScopePlatform}}}})
	opsItem, err := f.db.CreateItem(ctx, admin, ops.Key, store.NewItem{Kind: store.KindTicket, Title: "hidden"})
	if err != nil {
		t.Fatal(err)
	}
	glx, err := f.db.CreateItem(ctx, f.otherEngineer, "GLX", store.NewItem{Kind: store.KindTicket, Title: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	unknown := "WEB-99"
	hidden := map[string]string{"another project": opsItem.Key, "another organization": glx.Key}
	calls := []struct {
		name string
		call func(key string) error
	}{
		{"dependency from", func(key string) error {
			_, err := f.db.AddDependency(ctx, f.engineer, key, web, "blocks")
			return err
		}},
		{"dependency to", func(key string) error {
			_, err := f.db.AddDependency(ctx, f.engineer, web, key, "blocks")
			return err
		}},
		{"list dependencies", func(key string) error {
			_, err := f.db.ListDependencies(ctx, f.engineer, key)
			return err
		}},
		{"changeset update", func(key string) error {
			_, err := f.db.ProposeChangeset(ctx, f.engineer, "WEB", store.Proposal{Title: "t",
				Operations: []store.Operation{updateOp(key, store.ItemPatch{Title: ptr("x")})}})
			return err
		}},
		{"changeset dependency", func(key string) error {
			_, err := f.db.ProposeChangeset(ctx, f.engineer, "WEB", store.Proposal{Title: "t",
				Operations: []store.Operation{depOp(web2, key, "blocks")}})
			return err
		}},
	}
	for _, c := range calls {
		for what, key := range hidden {
			t.Run(c.name+" in "+what, func(t *testing.T) {
				before := f.snapshot(t)
				want := c.call(unknown)
				got := c.call(key)
				if want == nil || got == nil {
					t.Fatalf("errors %v and %v, want both refused", want, got)
				}
				wantMsg := strings.ReplaceAll(want.Error(), unknown, "KEY")
				gotMsg := strings.ReplaceAll(got.Error(), key, "KEY")
				if store.ErrorCode(got) != store.ErrorCode(want) || gotMsg != wantMsg {
					t.Fatalf("%s answers %s %q; an unknown key answers %s %q",
						key, store.ErrorCode(got), got, store.ErrorCode(want), want)
				}
				if f.snapshot(t) != before {
					t.Fatal("a refusal wrote something")
				}
			})
		}
	}
}
