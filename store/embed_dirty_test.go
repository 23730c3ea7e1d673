package store_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/jackc/pgx/v5"
)

// dirtyScopes names the dirty scopes as "<org key>:<project key>", sorted.
func dirtyScopes(t *testing.T, f *kbFix) []string {
	t.Helper()
	scopes, err := f.db.DirtyEmbedScopes(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	name := map[string]string{f.org.ID: "acme", f.other.ID: "globex", f.web.ID: "WEB", f.api.ID: "API", f.glx.ID: "GLX", "": ""}
	var out []string
	for _, s := range scopes {
		out = append(out, name[s.OrganizationID]+":"+name[s.ProjectID])
	}
	slices.Sort(out)
	return out
}

// TestEmbedDirtyTriggers: each kind of entity and edit marks its scope, an
// edit of no searchable column marks nothing.
func TestEmbedDirtyTriggers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	insertItem(t, f.db, f.web, 1, "Login page", "d")
	skill, err := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "web-skill", Scope: "project:WEB", Description: "d", Draft: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	orgSkill, err := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "org-skill", Scope: "organization:acme", Description: "d", Draft: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	platformSkill, err := f.db.CreateSkill(ctx, f.platform, store.NewSkill{Name: "all-skill", Scope: "platform", Description: "d", Draft: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	entry, err := f.db.CreateKnowledge(ctx, f.admin, "acme", store.NewKnowledge{Kind: "note", Title: "Notes", Body: "b"})
	if err != nil {
		t.Fatal(err)
	}
	text := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"item created", func() error { insertItem(t, f.db, f.api, 1, "Tokens", ""); return nil }, "acme:API"},
		{"item title", sqlDo(f, `UPDATE items SET title = 'Login page v2' WHERE key = 'WEB-1'`), "acme:WEB"},
		{"item description", sqlDo(f, `UPDATE items SET description = 'new' WHERE key = 'WEB-1'`), "acme:WEB"},
		{"item state only", sqlDo(f, `UPDATE items SET state = 'done' WHERE key = 'WEB-1'`), ""},
		{"item title unchanged", sqlDo(f, `UPDATE items SET title = title WHERE key = 'WEB-1'`), ""},
		{"item deleted", sqlDo(f, `DELETE FROM items WHERE key = 'WEB-1'`), "acme:WEB"},
		{"item in a rolled back transaction", func() error {
			return pgx.BeginFunc(ctx, f.db.Pool(), func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE items SET title = 'x' WHERE key = 'API-1'`); err != nil {
					return err
				}
				return errRollback
			})
		}, ""},
		{"project skill draft", func() error {
			_, err := f.db.UpdateSkillDraft(ctx, f.admin, skill.ID, store.SkillDraftUpdate{Draft: text("new draft")})
			return err
		}, "acme:WEB"},
		{"project skill published", func() error { _, err := f.db.PublishSkill(ctx, f.admin, skill.ID); return err }, ""},
		{"organization skill description", func() error {
			_, err := f.db.UpdateSkillDraft(ctx, f.admin, orgSkill.ID, store.SkillDraftUpdate{Description: text("new")})
			return err
		}, "acme:"},
		{"organization skill created", func() error {
			_, err := f.db.CreateSkill(ctx, f.outsider, store.NewSkill{Name: "glx-skill", Scope: "organization:globex", Description: "d"})
			return err
		}, "globex:"},
		{"platform skill draft", func() error {
			_, err := f.db.UpdateSkillDraft(ctx, f.platform, platformSkill.ID, store.SkillDraftUpdate{Draft: text("new")})
			return err
		}, ""},
		{"skill deleted", sqlDo(f, `DELETE FROM skills WHERE name = 'web-skill'`), "acme:WEB"},
		{"knowledge body", func() error {
			_, err := f.db.UpdateKnowledge(ctx, f.admin, "acme", entry.ID, store.KnowledgeUpdate{Version: 1, Body: text("new body")})
			return err
		}, "acme:"},
		{"knowledge projects only", func() error {
			_, err := f.db.UpdateKnowledge(ctx, f.admin, "acme", entry.ID, store.KnowledgeUpdate{Version: 2, Projects: &[]string{"WEB"}})
			return err
		}, ""},
		{"knowledge deleted", sqlDo(f, `DELETE FROM knowledge_entries WHERE id = $1`, entry.ID), "acme:"},
	} {
		// Sequential: the cases share the fixture's marks.
		mustExec(t, f.db, `DELETE FROM embed_dirty`)
		if err := tc.do(); err != nil && !errors.Is(err, errRollback) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.Join(dirtyScopes(t, f), ","); got != tc.want {
			t.Errorf("%s: dirty = %q, want %q", tc.name, got, tc.want)
		}
	}
}

var errRollback = errors.New("roll back")

func sqlDo(f *kbFix, sql string, args ...any) func() error {
	return func() error {
		_, err := f.db.Pool().Exec(context.Background(), sql, args...)
		return err
	}
}

// TestEmbedDirtyNotifies: a mark notifies EmbedDirtyChannel with
// "<org>:<project>" when its transaction commits, not before, on the
// connection of ListenEmbedDirty (named EmbedListenerName).
func TestEmbedDirtyNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	conn, err := f.db.ListenEmbedDirty(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var name string
	if err := conn.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&name); err != nil || name != store.EmbedListenerName {
		t.Fatalf("application_name %q, %v; want %q", name, err, store.EmbedListenerName)
	}
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `
		INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
		VALUES ($1, 7, 'WEB-7', 'ticket', 't', '', 'backlog', 'feature', 'agent', 'auto', 'test')`, f.web.ID); err != nil {
		t.Fatal(err)
	}
	early, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = conn.WaitForNotification(early)
	cancel()
	if err == nil {
		t.Fatal("notified before commit")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wait)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.org.ID + ":" + f.web.ID; n.Payload != want || n.Channel != store.EmbedDirtyChannel {
		t.Fatalf("notification %s %q, want %q", n.Channel, n.Payload, want)
	}
}

// TestEmbedScopeMarks: Mark keeps the oldest mark, Take removes it once,
// MarkAll marks every organization and project not marked yet.
func TestEmbedScopeMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	mustExec(t, f.db, `DELETE FROM embed_dirty`)
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	acme := store.EmbedScope{OrganizationID: f.org.ID}
	for _, batch := range [][]store.EmbedScope{
		{web},
		{acme, {OrganizationID: f.other.ID, ProjectID: f.web.ID}, // a project of another organization
			{OrganizationID: "00000000-0000-0000-0000-000000000001"}}, // no such organization
		{web}, // keeps its older mark
	} {
		if err := f.db.MarkEmbedScopes(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	scopes, err := f.db.DirtyEmbedScopes(ctx, 10)
	if err != nil || !slices.Equal(scopes, []store.EmbedScope{web, acme}) {
		t.Fatalf("dirty = %+v, %v; want WEB, then acme", scopes, err)
	}
	if scopes, _ := f.db.DirtyEmbedScopes(ctx, 1); len(scopes) != 1 {
		t.Fatalf("limit 1: %+v", scopes)
	}
	for _, tc := range []struct {
		s    store.EmbedScope
		want bool
	}{{web, true}, {web, false}, {acme, true}, {acme, false}} {
		if got, err := f.db.TakeEmbedScope(ctx, tc.s); err != nil || got != tc.want {
			t.Fatalf("take %+v = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
	if err := f.db.MarkEmbedScopes(ctx, web); err != nil {
		t.Fatal(err)
	}
	// Two organizations and three projects, WEB already marked.
	if n, err := f.db.MarkAllEmbedScopes(ctx); err != nil || n != 4 {
		t.Fatalf("mark all = %d, %v; want 4", n, err)
	}
	if got := strings.Join(dirtyScopes(t, f), ","); got != "acme:,acme:API,acme:WEB,globex:,globex:GLX" {
		t.Fatalf("dirty = %s", got)
	}
	if n, err := f.db.MarkAllEmbedScopes(ctx); err != nil || n != 0 {
		t.Fatalf("mark all again = %d, %v", n, err)
	}
}

// TestEmbedDirtyDoesNotSerialise: two open transactions editing items of
// one project never wait on each other for the mark, whether or not the
// project is marked already.
func TestEmbedDirtyDoesNotSerialise(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newKBFix(t)
	for round, marked := range []bool{false, true} {
		if !marked {
			mustExec(t, f.db, `DELETE FROM embed_dirty`)
		}
		var txs []pgx.Tx
		for i := range 2 {
			tx, err := f.db.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			// The second edit runs while the first transaction is open: a
			// wait would block it until the context ends.
			n := 10 + 10*round + i
			if _, err := tx.Exec(ctx, `
				INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
				VALUES ($1, $2, $3, 'ticket', 't', '', 'backlog', 'feature', 'agent', 'auto', 'test')`,
				f.web.ID, n, "WEB-"+strconv.Itoa(n)); err != nil {
				t.Fatalf("round %d, edit %d: %v", round, i, err)
			}
			txs = append(txs, tx)
		}
		for _, tx := range txs {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.Join(dirtyScopes(t, f), ","); got != "acme:WEB" {
			t.Fatalf("round %d: dirty = %q", round, got)
		}
	}
}
