package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// inputEnv is an api with the planner, one item (WEB-1), one skill and one
// planner session, for the input refusals below.
type inputEnv struct {
	*env
	skill   string // path of the skill
	session string // path of the planner session
}

func newInputEnv(t *testing.T) inputEnv {
	t.Helper()
	e := newEnv(t)
	e.restart(t, withPlanner())
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "one"})
	sk := e.do("POST", "/api/v1/skills", "admin", map[string]any{"name": "style", "scope": "organization:acme", "draft": "d"}).
		expect(t, http.StatusCreated)
	sess := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "plan"}).
		expect(t, http.StatusCreated)
	return inputEnv{env: e, skill: "/api/v1/skills/" + sk.Body["id"].(string),
		session: "/api/v1/planner/sessions/" + sess.Body["id"].(string)}
}

// snapshot is every count and version a write of the requests below would
// change.
func (e inputEnv) snapshot(t *testing.T) string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT count(*) FROM items`, `SELECT COALESCE(sum(version), 0) FROM items`,
		`SELECT count(*) FROM changesets`, `SELECT count(*) FROM skills`, `SELECT count(*) FROM skill_versions`,
		`SELECT count(*) FROM knowledge_entries`, `SELECT count(*) FROM planner_sessions`,
		`SELECT count(*) FROM planner_messages`, `SELECT count(*) FROM planner_turns`, `SELECT count(*) FROM events`,
	} {
		var n int64
		if err := e.db.Pool().QueryRow(context.Background(), q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out = append(out, fmt.Sprint(n))
	}
	return strings.Join(out, ",")
}

// send is a request with a raw body and the given Content-Type ("" sends
// none). Like do, it fails no test.
func (e inputEnv) send(method, path, who, contentType, body string) response {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return e.request(method, path, who, contentType, r)
}

// inputCase is one request and the reply it must get.
type inputCase struct {
	name, method, path, who, contentType, body string
	status                                     int
	code, message                              string
}

// run sends each case and checks its reply; a refusal (status ≥ 400) must
// leave every count as it was.
func (e inputEnv) run(t *testing.T, cases []inputCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot(t)
			ct := tc.contentType
			if ct == "" && tc.body != "" {
				ct = "application/json"
			}
			if ct == "-" {
				ct = ""
			}
			r := e.send(tc.method, tc.path, tc.who, ct, tc.body).expect(t, tc.status)
			if tc.status < 400 {
				return
			}
			if r.errorCode() != tc.code || !strings.Contains(r.message(), tc.message) {
				t.Fatalf("error = %s, want %s containing %q", r.Raw, tc.code, tc.message)
			}
			if after := e.snapshot(t); after != before {
				t.Fatalf("refusal wrote something: %s → %s", before, after)
			}
		})
	}
}

// TestJSONKeysAreExact checks that a body's keys must be spelled exactly as
// documented: another case, a duplicate or an unknown key is a 400 that
// names it, at any depth, and the messages of other mistakes keep their
// shape.
func TestJSONKeysAreExact(t *testing.T) {
	t.Parallel()
	e := newInputEnv(t)
	op := func(create string) string {
		return `{"title":"t","operations":[{"kind":"create_item","ref":"a","create":` + create + `}]}`
	}
	e.run(t, []inputCase{
		{"upper case keys", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"KIND":"ticket","TITLE":"x"}`, 400, "invalid_argument", `request body: unknown field "KIND"`},
		{"one key in another case", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","Title":"x"}`, 400, "invalid_argument", `unknown field "Title"`},
		{"duplicate key", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","title":"a","title":"b"}`, 400, "invalid_argument", `request body: duplicate field "title"`},
		{"duplicate in patch", "PATCH", "/api/v1/items/WEB-1", "engineer", "", `{"version":1,"title":"a","version":2}`, 400, "invalid_argument", `duplicate field "version"`},
		{"case in patch", "PATCH", "/api/v1/items/WEB-1", "engineer", "", `{"Version":1,"title":"a"}`, 400, "invalid_argument", `unknown field "Version"`},
		{"case in knowledge", "POST", "/api/v1/organizations/acme/knowledge/entries", "admin", "", `{"kind":"note","title":"t","BODY":"b"}`, 400, "invalid_argument", `unknown field "BODY"`},
		{"duplicate in knowledge", "POST", "/api/v1/organizations/acme/knowledge/entries", "admin", "", `{"kind":"note","title":"t","body":"b","kind":"decision"}`, 400, "invalid_argument", `duplicate field "kind"`},
		{"case in skill draft", "PATCH", e.skill, "admin", "", `{"Draft":"x"}`, 400, "invalid_argument", `unknown field "Draft"`},
		{"case in session", "POST", "/api/v1/projects/WEB/planner/sessions", "engineer", "", `{"Title":"x"}`, 400, "invalid_argument", `unknown field "Title"`},
		{"case in an operation", "POST", "/api/v1/projects/WEB/changesets", "engineer", "", op(`{"kind":"ticket","Title":"x"}`), 400, "invalid_argument", `unknown field "Title" in operations[0].create`},
		{"duplicate in an operation", "POST", "/api/v1/projects/WEB/changesets", "engineer", "", op(`{"kind":"ticket","title":"x","title":"y"}`), 400, "invalid_argument", `duplicate field "title" in operations[0].create`},
		{"publish with a body", "POST", e.skill + "/publish", "admin", "", `{"force":true}`, 400, "invalid_argument", `unknown field "force"`},
		{"publish with a non-object", "POST", e.skill + "/publish", "admin", "", `[1]`, 400, "invalid_argument", "request body: expected a JSON object"},
		// The shapes of the other messages stay as they were.
		{"wrong type", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","title":7}`, 400, "invalid_argument", "request body: field title: must be a string, got number"},
		{"wrong type nested", "POST", "/api/v1/projects/WEB/changesets", "engineer", "", op(`{"kind":"ticket","title":7}`), 400, "invalid_argument", "field operations[0].create.title: must be a string, got number"},
		{"not an object", "POST", "/api/v1/projects/WEB/items", "engineer", "", `[]`, 400, "invalid_argument", "request body: expected a JSON object"},
		{"empty body", "POST", "/api/v1/projects/WEB/items", "engineer", "", ``, 400, "invalid_argument", "request body: expected a JSON object"},
		{"trailing data", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","title":"x"} {}`, 400, "invalid_argument", "request body: unexpected data after the JSON object"},
		{"malformed", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket",`, 400, "invalid_argument", "request body: malformed JSON"},
		{"fraction for an integer", "PATCH", "/api/v1/items/WEB-1", "engineer", "", `{"version":1.5,"title":"x"}`, 400, "invalid_argument", "field version: must be an integer, got 1.5"},
		{"integer out of range", "PATCH", "/api/v1/items/WEB-1", "engineer", "", `{"version":99999999999999999999,"title":"x"}`, 400, "invalid_argument", "field version: out of range, got 99999999999999999999"},
		// What is right is still accepted.
		{"exact keys", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","title":"x"}`, 201, "", ""},
		{"publish with no body", "POST", e.skill + "/publish", "admin", "-", ``, 201, "", ""},
		{"publish with an empty object", "POST", e.skill + "/publish", "admin", "", `{}`, 201, "", ""},
	})
}

// TestNULRefused checks that a NUL character, which Postgres text cannot
// hold, is refused with a 400 naming the field or parameter wherever a
// client can send one, and that nothing is stored.
func TestNULRefused(t *testing.T) {
	t.Parallel()
	e := newInputEnv(t)
	const nul = "field %s: must not contain NUL characters"
	e.run(t, []inputCase{
		{"item title", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","title":"a\u0000b"}`, 400, "invalid_argument", fmt.Sprintf(nul, "title")},
		{"item patch", "PATCH", "/api/v1/items/WEB-1", "engineer", "", `{"version":1,"description":"x\u0000"}`, 400, "invalid_argument", fmt.Sprintf(nul, "description")},
		{"acceptance criterion", "PATCH", "/api/v1/items/WEB-1", "engineer", "", `{"version":1,"acceptance_criteria":["ok","\u0000"]}`, 400, "invalid_argument", fmt.Sprintf(nul, "acceptance_criteria[1]")},
		{"knowledge entry", "POST", "/api/v1/organizations/acme/knowledge/entries", "admin", "", `{"kind":"note","title":"t","body":"b\u0000"}`, 400, "invalid_argument", fmt.Sprintf(nul, "body")},
		{"skill draft", "PATCH", e.skill, "admin", "", `{"draft":"\u0000"}`, 400, "invalid_argument", fmt.Sprintf(nul, "draft")},
		{"changeset operation", "POST", "/api/v1/projects/WEB/changesets", "engineer", "",
			`{"title":"t","operations":[{"kind":"create_item","ref":"a","create":{"kind":"ticket","title":"x\u0000"}}]}`, 400, "invalid_argument", fmt.Sprintf(nul, "operations[0].create.title")},
		{"session title", "POST", "/api/v1/projects/WEB/planner/sessions", "engineer", "", `{"title":"s\u0000"}`, 400, "invalid_argument", fmt.Sprintf(nul, "title")},
		{"planner message", "POST", e.session + "/messages", "engineer", "", `{"text":"hi\u0000"}`, 400, "invalid_argument", fmt.Sprintf(nul, "text")},
		{"query parameter", "GET", "/api/v1/projects/WEB/items?kind=%00", "viewer", "", "", 400, "invalid_argument", `query parameter "kind": must not contain NUL characters`},
		{"search query", "GET", "/api/v1/search?q=a%00b", "viewer", "", "", 400, "invalid_argument", `query parameter "q": must not contain NUL characters`},
		{"path parameter", "GET", "/api/v1/items/WEB%001", "viewer", "", "", 400, "invalid_argument", `path parameter "item": must not contain NUL characters`},
		{"path parameter of a write", "POST", "/api/v1/projects/WE%00B/items", "engineer", "", `{"kind":"ticket","title":"x"}`, 400, "invalid_argument", `path parameter "project": must not contain NUL characters`},
		// An escaped backslash before "u0000" is no NUL.
		{"escaped backslash", "POST", "/api/v1/projects/WEB/items", "engineer", "", `{"kind":"ticket","title":"a\\u0000b"}`, 201, "", ""},
	})
	var title string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT title FROM items ORDER BY number DESC LIMIT 1`).Scan(&title); err != nil {
		t.Fatal(err)
	}
	if title != `a\u0000b` {
		t.Fatalf("stored title %q, want the text as sent", title)
	}
}

// TestInvalidUTF8Refused: a query or path parameter that is not UTF-8 (a
// lone surrogate, a stray byte) is refused with 400 naming it, before any
// query reaches Postgres, which would refuse it with SQLSTATE 22021.
func TestInvalidUTF8Refused(t *testing.T) {
	t.Parallel()
	e := newInputEnv(t)
	e.run(t, []inputCase{
		{"surrogate in a filter", "GET", "/api/v1/projects/WEB/items?epic=%ED%A0%80", "viewer", "", "", 400, "invalid_argument", `query parameter "epic": must be valid UTF-8`},
		{"stray byte in a filter", "GET", "/api/v1/search?q=x&project=%FF", "viewer", "", "", 400, "invalid_argument", `query parameter "project": must be valid UTF-8`},
		{"stray byte in a key", "GET", "/api/v1/projects/WEB/items?%FF=1", "viewer", "", "", 400, "invalid_argument", "must be valid UTF-8"},
		{"path parameter", "GET", "/api/v1/items/WEB%FF1", "viewer", "", "", 400, "invalid_argument", `path parameter "item": must be valid UTF-8`},
		{"path parameter of a write", "POST", "/api/v1/projects/W%C3EB/items", "engineer", "", `{"kind":"ticket","title":"x"}`, 400, "invalid_argument", `path parameter "project": must be valid UTF-8`},
		{"valid UTF-8 is kept", "GET", "/api/v1/search?q=%C3%A9t%C3%A9", "viewer", "", "", 200, "", ""},
	})
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM items WHERE title = 'x'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("items written: %d, %v", n, err)
	}
}

// TestWritesRequireJSON checks that a write with a body must say it is
// JSON: a text/plain or form POST (what another site's page can send
// without asking) is refused with 415 before anything runs, while writes
// that need no body keep working without one.
func TestWritesRequireJSON(t *testing.T) {
	t.Parallel()
	e := newInputEnv(t)
	item := `{"kind":"ticket","title":"x"}`
	e.run(t, []inputCase{
		{"text/plain", "POST", "/api/v1/projects/WEB/items", "engineer", "text/plain", item, 415, "invalid_argument", `Content-Type: must be application/json, got "text/plain"`},
		{"text/plain with charset", "POST", "/api/v1/projects/WEB/items", "engineer", "text/plain;charset=UTF-8", item, 415, "invalid_argument", `got "text/plain"`},
		{"form", "POST", "/api/v1/projects/WEB/items", "engineer", "application/x-www-form-urlencoded", "kind=ticket&title=x", 415, "invalid_argument", `got "application/x-www-form-urlencoded"`},
		{"multipart", "POST", "/api/v1/projects/WEB/items", "engineer", "multipart/form-data; boundary=x", "--x--", 415, "invalid_argument", `got "multipart/form-data"`},
		{"no content type", "POST", "/api/v1/projects/WEB/items", "engineer", "-", item, 415, "invalid_argument", "Content-Type: must be application/json, got none"},
		{"malformed content type", "POST", "/api/v1/projects/WEB/items", "engineer", "application/json; charset", item, 415, "invalid_argument", "Content-Type: must be application/json"},
		{"other charset", "POST", "/api/v1/projects/WEB/items", "engineer", "application/json; charset=latin1", item, 415, "invalid_argument", `Content-Type: charset must be utf-8, got "latin1"`},
		{"patch as text", "PATCH", "/api/v1/items/WEB-1", "engineer", "text/plain", `{"version":1,"title":"y"}`, 415, "invalid_argument", `got "text/plain"`},
		{"put as text", "PUT", "/api/v1/projects/WEB/skills/style/pin", "admin", "text/plain", `{"version":1}`, 415, "invalid_argument", `got "text/plain"`},
		{"before authentication", "POST", "/api/v1/projects/WEB/items", "", "text/plain", item, 415, "invalid_argument", `got "text/plain"`},
		{"form post without a body", "POST", e.skill + "/publish", "admin", "application/x-www-form-urlencoded", "", 415, "invalid_argument", `got "application/x-www-form-urlencoded"`},
		// JSON in its spellings, and writes that need no body.
		{"json with charset", "POST", "/api/v1/projects/WEB/items", "engineer", "application/json; charset=utf-8", item, 201, "", ""},
		{"json in capitals", "POST", "/api/v1/projects/WEB/items", "engineer", "Application/JSON;Charset=UTF-8", item, 201, "", ""},
		{"post without a body", "POST", e.skill + "/publish", "admin", "-", "", 201, "", ""},
		{"cancel without a body", "POST", e.session + "/cancel", "engineer", "-", "", 200, "", ""},
		{"pin", "PUT", "/api/v1/projects/WEB/skills/style/pin", "admin", "", `{"version":0}`, 200, "", ""},
		{"delete without a body", "DELETE", "/api/v1/projects/WEB/skills/style/pin", "admin", "-", "", 204, "", ""},
		{"get with a content type", "GET", "/api/v1/items/WEB-1", "viewer", "text/plain", "", 200, "", ""},
	})
	var kinds []string
	rows, err := e.db.Pool().Query(context.Background(), `SELECT kind FROM items ORDER BY number`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(kinds) != 3 {
		t.Fatalf("items %v, want the first and the two JSON creates", kinds)
	}
}
