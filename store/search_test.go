package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// metaQueries are inputs full of SQL and tsquery syntax; each must search
// as plain text.
var metaQueries = []string{
	`'`, `"`, `''; DROP TABLE items; --`, `login & | ! ( ) : *`, `\`, `login\`, `a:*`, `!!!`, `(`,
	`"unterminated`, `-login`, `login OR`, `or`, `<->`, `%_`, "nul\x00byte", "\xff\xfe", `$1`, `;`, `--`,
}

func searchFix(t *testing.T) *kbFix {
	t.Helper()
	f := newKBFix(t)
	for n, title := range map[int]string{
		1: "Login page redesign", 2: "Password reset email", 3: "Authentication service", 12: "Checkout flow",
		120: "Cart badge", 121: "Search suggestions",
	} {
		insertItem(t, f.db, f.web, n, title, "Work on "+strings.ToLower(title)+" for the web app.")
	}
	insertItem(t, f.db, f.api, 1, "Authentication tokens for the API", "")
	insertItem(t, f.db, f.glx, 1, "Authentication at Globex", "secret")
	return f
}

func keysOf(hits []store.SearchHit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Key+h.Name)
	}
	return out
}

func TestSearchItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := searchFix(t)
	for _, tc := range []struct {
		name   string
		caller store.Caller
		q      store.SearchQuery
		first  string
		absent []string
	}{
		{"key", f.viewer, store.SearchQuery{Q: "WEB-12", Kind: "item"}, "WEB-12", nil},
		{"key lower-case", f.viewer, store.SearchQuery{Q: "web-12", Kind: "item"}, "WEB-12", nil},
		{"full text", f.viewer, store.SearchQuery{Q: "password reset"}, "WEB-2", nil},
		{"typo", f.viewer, store.SearchQuery{Q: "authentcation", Kind: "item"}, "WEB-3", []string{"API-1", "GLX-1"}},
		{"org admin sees both projects", f.admin, store.SearchQuery{Q: "authentication", Kind: "item"}, "", []string{"GLX-1"}},
		{"project filter", f.admin, store.SearchQuery{Q: "authentication", Project: "API"}, "API-1", []string{"WEB-3"}},
		{"outsider", f.outsider, store.SearchQuery{Q: "authentication"}, "GLX-1", []string{"WEB-3", "API-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := f.db.Search(ctx, tc.caller, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			keys := keysOf(hits)
			if len(hits) == 0 || (tc.first != "" && keys[0] != tc.first) {
				t.Fatalf("hits = %v, want %s first", keys, tc.first)
			}
			for _, k := range tc.absent {
				for _, got := range keys {
					if got == k {
						t.Fatalf("hits = %v must not contain %s", keys, k)
					}
				}
			}
			if hits[0].Score <= 0 || hits[0].Snippet == "" {
				t.Fatalf("first hit has no score or snippet: %+v", hits[0])
			}
		})
	}
	hits, _ := f.db.Search(ctx, f.viewer, store.SearchQuery{Q: "password reset"})
	if !strings.Contains(hits[0].Snippet, "**") || hits[0].Project != "WEB" || hits[0].State != "backlog" {
		t.Fatalf("hit = %+v, want a highlighted snippet", hits[0])
	}
	for _, tc := range []struct {
		name   string
		caller store.Caller
		q      store.SearchQuery
		code   store.Code
	}{
		{"empty", f.viewer, store.SearchQuery{Q: "  "}, store.CodeInvalid},
		{"bad kind", f.viewer, store.SearchQuery{Q: "x", Kind: "user"}, store.CodeInvalid},
		{"limit", f.viewer, store.SearchQuery{Q: "x", Limit: 51}, store.CodeInvalid},
		{"long", f.viewer, store.SearchQuery{Q: strings.Repeat("x", 501)}, store.CodeInvalid},
		{"other org's project", f.viewer, store.SearchQuery{Q: "x", Project: "GLX"}, store.CodeNotFound},
		{"project not bound", f.viewer, store.SearchQuery{Q: "x", Project: "API", Kind: "item"}, store.CodeForbidden},
	} {
		t.Run("refuse "+tc.name, func(t *testing.T) {
			_, err := f.db.Search(ctx, tc.caller, tc.q)
			wantCode(t, err, tc.code, "")
		})
	}
}

func TestSearchMetacharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := searchFix(t)
	if _, err := f.db.CreateKnowledge(ctx, f.admin, "acme", store.NewKnowledge{Kind: "note", Title: "Login notes", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range metaQueries {
		t.Run(q, func(t *testing.T) {
			if _, err := f.db.Search(ctx, f.admin, store.SearchQuery{Q: q}); err != nil && !store.IsCode(err, store.CodeInvalid) {
				t.Fatalf("search %q: %v", q, err)
			}
			if _, err := f.db.SearchKnowledge(ctx, f.admin, "acme", store.KnowledgeSearch{Q: q}); err != nil && !store.IsCode(err, store.CodeInvalid) {
				t.Fatalf("knowledge search %q: %v", q, err)
			}
		})
	}
	// Operators are words: "login & | !" still finds the login page.
	hits, err := f.db.Search(ctx, f.admin, store.SearchQuery{Q: `login & | ! ( ) : *`, Kind: "item"})
	if err != nil || len(hits) == 0 || hits[0].Key != "WEB-1" {
		t.Fatalf("hits = %v, %v", keysOf(hits), err)
	}
	if n := f.count(t, `SELECT count(*) FROM items`); n != 8 {
		t.Fatalf("items = %d after searching", n)
	}
}

func TestSearchSkills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	mk := func(c store.Caller, name, scope, desc string) {
		t.Helper()
		if _, err := f.db.CreateSkill(ctx, c, store.NewSkill{Name: name, Scope: scope, Description: desc, Draft: desc}); err != nil {
			t.Fatal(err)
		}
	}
	mk(f.platform, "code-review", "platform", "Review pull requests carefully")
	mk(f.admin, "release-notes", "organization:acme", "Write release notes for each deploy")
	mk(f.admin, "api-review", "project:API", "Review API changes")
	mk(f.outsider, "globex-review", "organization:globex", "Review at Globex")
	for _, tc := range []struct {
		name   string
		caller store.Caller
		q      store.SearchQuery
		want   string
	}{
		{"viewer of WEB", f.viewer, store.SearchQuery{Q: "review", Kind: "skill"}, "code-review"},
		{"org admin", f.admin, store.SearchQuery{Q: "review", Kind: "skill"}, "api-review,code-review"},
		{"project filter", f.admin, store.SearchQuery{Q: "review", Kind: "skill", Project: "WEB"}, "code-review"},
		{"typo in name", f.viewer, store.SearchQuery{Q: "relase notes", Kind: "skill"}, "release-notes"},
		{"outsider", f.outsider, store.SearchQuery{Q: "review", Kind: "skill"}, "code-review,globex-review"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := f.db.Search(ctx, tc.caller, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			got := keysOf(hits)
			slices.Sort(got)
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("skills = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestSearchKnowledge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	for _, n := range []store.NewKnowledge{
		{Kind: "decision", Title: "Authentication with OIDC", Body: "We use an identity provider.", Projects: []string{"WEB"}},
		{Kind: "debt", Title: "Legacy session cookies", Body: "Replace cookies before authentication work.", Projects: []string{"API"}},
		{Kind: "note", Title: "Team lunch", Body: "Fridays."},
	} {
		if _, err := f.db.CreateKnowledge(ctx, f.admin, "acme", n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.db.CreateKnowledge(ctx, f.outsider, "globex", store.NewKnowledge{Kind: "decision", Title: "Authentication at Globex", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ks   store.KnowledgeSearch
		want string
	}{
		{"full text", store.KnowledgeSearch{Q: "authentication"}, "Authentication with OIDC,Legacy session cookies"},
		{"typo", store.KnowledgeSearch{Q: "authentcation"}, "Authentication with OIDC"},
		{"kind", store.KnowledgeSearch{Q: "authentication", Kind: "debt"}, "Legacy session cookies"},
		{"project", store.KnowledgeSearch{Q: "authentication", Project: "web"}, "Authentication with OIDC"},
		{"nothing", store.KnowledgeSearch{Q: "kubernetes"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := f.db.SearchKnowledge(ctx, f.viewer, "acme", tc.ks)
			if err != nil {
				t.Fatal(err)
			}
			var titles []string
			for _, h := range hits {
				titles = append(titles, h.Title)
				if h.Score <= 0 || h.Snippet == "" {
					t.Fatalf("hit without score or snippet: %+v", h)
				}
			}
			if got := strings.Join(titles, ","); got != tc.want {
				t.Fatalf("titles = %q, want %q", got, tc.want)
			}
		})
	}
	_, err := f.db.SearchKnowledge(ctx, f.outsider, "acme", store.KnowledgeSearch{Q: "authentication"})
	wantCode(t, err, store.CodeNotFound, `organization "acme" not found`)
	_, err = f.db.SearchKnowledge(ctx, f.viewer, "acme", store.KnowledgeSearch{Q: "x", Kind: "memo"})
	wantCode(t, err, store.CodeInvalid, "kind:")
}
