package tools_test

import (
	"context"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// The session's transcript is readable by everyone who reads its project,
// so get_item keeps to that project even for a human who may read more.
func TestGetItemKeepsToTheSessionsProject(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ops := got(f.db.CreateProject(ctx, f.org.ID, "OPS", "Operations", store.SystemActor()))(t)
	secret := got(f.db.CreateItem(ctx, store.HumanCaller(f.admin), ops.Key,
		store.NewItem{Kind: "ticket", Title: "Rotate the production keys"}))(t)
	// The admin may read it over REST …
	if _, err := f.db.GetItem(ctx, store.HumanCaller(f.admin), secret.Key); err != nil {
		t.Fatalf("admin reads %s: %v", secret.Key, err)
	}
	// … but the planner in WEB does not fetch it into the WEB transcript.
	f.fails(t, f.admin, "get_item", `{"key":"`+secret.Key+`"}`, "not found", secret.Key, "WEB")
}
