package api_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// kbMetaQueries carry SQL and tsquery syntax; each must search as text.
var kbMetaQueries = []string{
	`'`, `"`, `'; DROP TABLE items; --`, `login & | ! ( ) : *`, `\`, `a:*`, `!!!`, `(`, `"open`, `-`, `--`,
	`;`, `$1`, `%`, `login\'s`, `<->`, `OR`, `*`,
}

func kbSearchEnv(t *testing.T) *env {
	e := newEnv(t)
	for n, title := range map[int]string{1: "Login page redesign", 2: "Password reset", 3: "Authentication service",
		12: "Checkout flow", 120: "Cart badge"} {
		e.kbItem(t, e.project.ID, "WEB", n, title)
	}
	e.kbItem(t, e.otherProject.ID, "GLX", 1, "Authentication at Globex")
	e.do("POST", "/api/v1/organizations/acme/knowledge/entries", "admin", map[string]any{"kind": "decision",
		"title": "Authentication with OIDC", "body": "We use an identity provider."}).expect(t, 201)
	e.do("POST", "/api/v1/skills", "admin", map[string]any{"name": "login-review", "scope": "organization:acme",
		"description": "Review login changes", "draft": "Check the login flow."}).expect(t, 201)
	return e
}

func TestSearchREST(t *testing.T) {
	t.Parallel()
	e := kbSearchEnv(t)
	for _, tc := range []struct {
		name, who, query string
		first            string // key or name of the first hit
		n                int    // exact count, -1 for any
	}{
		{"key", "viewer", "q=WEB-12", "WEB-12", -1},
		{"key lower-case", "viewer", "q=web-12&kind=item", "WEB-12", -1},
		{"full text", "viewer", "q=password+reset", "WEB-2", -1},
		{"typo", "viewer", "q=authentcation&kind=item", "WEB-3", 1},
		{"skills", "viewer", "q=login&kind=skill", "login-review", 1},
		{"both kinds", "viewer", "q=login", "", 2},
		{"project filter", "engineer", "q=authentication&project=WEB", "WEB-3", 1},
		{"limit", "viewer", "q=login+OR+password+OR+checkout&kind=item&limit=2", "", 2},
		{"outsider sees only globex", "outsider", "q=authentication", "GLX-1", 1},
		{"no match", "viewer", "q=kubernetes", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := e.do("GET", "/api/v1/search?"+tc.query, tc.who, nil).expect(t, 200).kbList(t)
			if tc.n >= 0 && len(hits) != tc.n {
				t.Fatalf("%d hits, want %d: %v", len(hits), tc.n, hits)
			}
			if tc.first == "" {
				return
			}
			first := hits[0]
			if first["key"] != tc.first && first["name"] != tc.first {
				t.Fatalf("first hit %v, want %s", first, tc.first)
			}
			if s, _ := first["score"].(float64); s <= 0 || first["snippet"] == "" || first["kind"] == nil {
				t.Fatalf("hit without score, snippet or kind: %v", first)
			}
		})
	}
	for _, q := range kbMetaQueries {
		t.Run("metacharacters "+q, func(t *testing.T) {
			e.do("GET", "/api/v1/search?q="+url.QueryEscape(q), "viewer", nil).expect(t, 200).kbList(t)
			e.do("GET", "/api/v1/organizations/acme/knowledge/search?q="+url.QueryEscape(q), "viewer", nil).expect(t, 200).kbList(t)
		})
	}
	if n := e.kbCount(t, `SELECT count(*) FROM items`); n != 6 {
		t.Fatalf("items = %d after the searches", n)
	}
	kbRefuse(t, e, nil, []kbRefusal{
		{"no token", "GET", "/api/v1/search?q=x", "", nil, 401, "unauthenticated", "bearer"},
		{"no q", "GET", "/api/v1/search", "viewer", nil, 400, "invalid_argument", "q: must not be empty"},
		{"bad kind", "GET", "/api/v1/search?q=x&kind=user", "viewer", nil, 400, "invalid_argument", "kind: must be item or skill"},
		{"limit too high", "GET", "/api/v1/search?q=x&limit=51", "viewer", nil, 400, "invalid_argument", "limit: must be 1-50"},
		{"limit not a number", "GET", "/api/v1/search?q=x&limit=many", "viewer", nil, 400, "invalid_argument", "limit: must be an integer"},
		{"other org's project", "GET", "/api/v1/search?q=x&project=GLX", "viewer", nil, 404, "not_found", "not found"},
	})
}

func TestKnowledgeSearchREST(t *testing.T) {
	t.Parallel()
	e := kbSearchEnv(t)
	e.do("POST", "/api/v1/organizations/acme/knowledge/entries", "engineer", map[string]any{"kind": "debt",
		"title": "Legacy session cookies", "body": "Replace before authentication work.", "projects": []string{"WEB"}}).expect(t, 201)
	base := "/api/v1/organizations/acme/knowledge/search?"
	for _, tc := range []struct {
		name, query string
		titles      []string
	}{
		{"full text", "q=authentication", []string{"Authentication with OIDC", "Legacy session cookies"}},
		{"typo", "q=authentcation", []string{"Authentication with OIDC"}},
		{"kind", "q=authentication&kind=debt", []string{"Legacy session cookies"}},
		{"project", "q=authentication&project=WEB", []string{"Legacy session cookies"}},
		{"limit", "q=authentication&limit=1", []string{"Authentication with OIDC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := e.do("GET", base+tc.query, "viewer", nil).expect(t, 200).kbList(t)
			if len(hits) != len(tc.titles) {
				t.Fatalf("hits %v, want %v", hits, tc.titles)
			}
			for i, h := range hits {
				if h["title"] != tc.titles[i] || h["snippet"] == "" || h["score"] == nil {
					t.Fatalf("hit %d = %v, want %s", i, h, tc.titles[i])
				}
			}
		})
	}
	kbRefuse(t, e, nil, []kbRefusal{
		{"outsider", "GET", base + "q=authentication", "outsider", nil, 404, "not_found", `organization "acme" not found`},
		{"bad kind", "GET", base + "q=x&kind=memo", "viewer", nil, 400, "invalid_argument", "kind:"},
		{"limit", "GET", base + "q=x&limit=0", "viewer", nil, 400, "invalid_argument", "limit:"},
	})
}

// TestSearchBoundsREST: a query over the term or length limit is 400
// naming the limit, on both search paths, and nothing is written.
func TestSearchBoundsREST(t *testing.T) {
	t.Parallel()
	e := kbSearchEnv(t)
	var negations []string
	for i := range 100 {
		negations = append(negations, "-x"+strconv.Itoa(i))
	}
	var cases []kbRefusal
	for _, tc := range []struct{ name, q, msg string }{
		{"50 dashes", strings.Repeat("-", 50), "q: at most 16 terms (words and operators such as -), got 50"},
		{"lorem ipsum x40", strings.TrimSpace(strings.Repeat("lorem ipsum ", 40)), "q: at most 16 terms"},
		{"-x0 … -x99", strings.Join(negations, " "), "q: at most 16 terms"},
		{"too long", strings.Repeat("x", 501), "q: at most 500 characters, got 501"},
	} {
		q := "q=" + url.QueryEscape(tc.q)
		cases = append(cases,
			kbRefusal{tc.name, "GET", "/api/v1/search?" + q, "viewer", nil, 400, "invalid_argument", tc.msg},
			kbRefusal{"knowledge " + tc.name, "GET", "/api/v1/organizations/acme/knowledge/search?" + q, "viewer", nil,
				400, "invalid_argument", tc.msg})
	}
	kbRefuse(t, e, []string{`SELECT count(*) FROM items`, `SELECT count(*) FROM knowledge_entries`}, cases)
	hits := e.do("GET", "/api/v1/search?q="+url.QueryEscape("login "+strings.Repeat("- ", 14)+"page"), "viewer", nil).
		expect(t, 200).kbList(t)
	if len(hits) == 0 {
		t.Fatalf("a query of 16 terms found nothing")
	}
}
