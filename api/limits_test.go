package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// limitsSnapshot sums up the limits table, to show that a refusal wrote
// nothing.
func limitsSnapshot(t *testing.T, e *env) string {
	t.Helper()
	var s string
	err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*)::text || '|' ||
		COALESCE(string_agg(concat_ws(':', token_budget, budget_unit, budget_period, requests_per_minute, tokens_per_minute, updated_at), ',' ORDER BY id), '')
		FROM limits`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// limitsLine renders the four limit fields of m as budget/period/rpm/tpm.
func limitsLine(m map[string]any) string {
	return fmt.Sprintf("%v/%v/%v/%v", m["token_budget"], m["budget_period"], m["requests_per_minute"], m["tokens_per_minute"])
}

func TestLimitsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	org, proj := "/api/v1/organizations/acme/limits", "/api/v1/projects/WEB/limits"

	// Nothing stored: everything null, no limit in force.
	for _, p := range []string{org, proj} {
		r := e.do("GET", p, "viewer", nil).expect(t, 200)
		if got := limitsLine(r.Body); got != "<nil>/month/<nil>/<nil>" {
			t.Errorf("GET %s stored %s", p, got)
		}
		if got := limitsLine(r.Body["effective"].(map[string]any)); got != "<nil>/month/<nil>/<nil>" {
			t.Errorf("GET %s effective %s", p, got)
		}
		if r.Body["updated_at"] != nil || r.Body["updated_by"] != nil {
			t.Errorf("GET %s: %s", p, r.Raw)
		}
	}

	refusals := []tenancyCall{
		{"no token", "PUT", org, "", map[string]any{"token_budget": 1}, 401, "unauthenticated", ""},
		{"viewer", "PUT", org, "viewer", map[string]any{"token_budget": 1}, 403, "forbidden", "credential.manage"},
		{"engineer", "PUT", proj, "engineer", map[string]any{"token_budget": 1}, 403, "forbidden", "credential.manage"},
		{"approver delete", "DELETE", proj, "approver", nil, 403, "forbidden", "credential.manage"},
		{"outsider put", "PUT", org, "outsider", map[string]any{"token_budget": 1}, 404, "not_found", "acme"},
		{"outsider get", "GET", proj, "outsider", nil, 404, "not_found", "WEB"},
		{"outsider get org", "GET", org, "outsider", nil, 404, "not_found", "acme"},
		{"unknown field", "PUT", org, "admin", `{"token_budget":1,"cost_budget":2}`, 400, "invalid_argument", `unknown field "cost_budget"`},
		{"both budgets", "PUT", org, "admin", `{"token_budget":1,"budget":2}`, 400, "invalid_argument", "budget and token_budget: set at most one"},
		{"bad unit", "PUT", proj, "admin", `{"budget":1,"budget_unit":"eur"}`, 400, "invalid_argument", `budget_unit: must be tokens or micro_usd, got "eur"`},
		{"token budget in money", "PUT", proj, "admin", `{"token_budget":1,"budget_unit":"micro_usd"}`, 400, "invalid_argument", "token_budget: counts tokens, but budget_unit is micro_usd"},
		{"negative money", "PUT", proj, "admin", `{"budget":-1,"budget_unit":"micro_usd"}`, 400, "invalid_argument", "budget: must be 0-"},
		{"wrong type", "PUT", proj, "admin", `{"requests_per_minute":"10"}`, 400, "invalid_argument", "field requests_per_minute: must be a number"},
		{"fraction", "PUT", proj, "admin", `{"tokens_per_minute":1.5}`, 400, "invalid_argument", "tokens_per_minute"},
		{"negative", "PUT", org, "admin", map[string]any{"tokens_per_minute": -1}, 400, "invalid_argument", "tokens_per_minute: must be 0-"},
		{"too many requests per minute", "PUT", proj, "admin", map[string]any{"requests_per_minute": int64(1) << 40}, 400, "invalid_argument", "requests_per_minute: must be 0-2147483647"},
		{"bad period", "PUT", org, "admin", map[string]any{"token_budget": 5, "budget_period": "year"}, 400, "invalid_argument", `budget_period: must be day, week or month, got "year"`},
		{"no body", "PUT", org, "admin", nil, 400, "invalid_argument", "request body"},
		{"delete nothing", "DELETE", proj, "admin", nil, 404, "not_found", "no limits are stored for project WEB"},
		{"delete nothing org", "DELETE", org, "admin", nil, 404, "not_found", "no limits are stored for organization acme"},
		{"other organization's project", "PUT", "/api/v1/projects/GLX/limits", "admin", map[string]any{"token_budget": 1}, 404, "not_found", "GLX"},
	}
	empty := limitsSnapshot(t, e)
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			e.runCalls(t, []tenancyCall{c})
			if got := limitsSnapshot(t, e); got != empty {
				t.Fatalf("a refusal wrote limits: %s", got)
			}
		})
	}

	// The organization's defaults, then a project override merged field by field.
	r := e.do("PUT", org, "admin", map[string]any{"token_budget": 1000000, "budget_period": "week", "tokens_per_minute": 50000}).expect(t, 200)
	if got := limitsLine(r.Body); got != "1e+06/week/<nil>/50000" {
		t.Errorf("PUT org stored %s", got)
	}
	if r.Body["scope"] != "organization" || r.Body["updated_by"] != "admin@example.com" || r.Body["updated_at"] == nil {
		t.Errorf("PUT org reply %s", r.Raw)
	}
	r = e.do("PUT", proj, "platform", map[string]any{"requests_per_minute": 10, "tokens_per_minute": nil}).expect(t, 200)
	if got := limitsLine(r.Body); got != "<nil>/month/10/<nil>" {
		t.Errorf("PUT project stored %s", got)
	}
	if got := limitsLine(r.Body["effective"].(map[string]any)); got != "1e+06/week/10/50000" {
		t.Errorf("PUT project effective %s", got)
	}
	r = e.do("GET", proj, "engineer", nil).expect(t, 200)
	if r.Body["scope"] != "project" || r.Body["project"] != "WEB" || r.Body["organization"] != "acme" ||
		limitsLine(r.Body["effective"].(map[string]any)) != "1e+06/week/10/50000" {
		t.Errorf("GET project %s", r.Raw)
	}
	// The project's own budget wins over the organization's, period included.
	r = e.do("PUT", proj, "admin", map[string]any{"token_budget": 0, "budget_period": "day"}).expect(t, 200)
	if got := limitsLine(r.Body["effective"].(map[string]any)); got != "0/day/<nil>/50000" {
		t.Errorf("effective after override %s", got)
	}
	if n := e.countRows(t, "limits"); n != 2 {
		t.Errorf("%d limits rows, want 2", n)
	}
	// Another organization's limits are its own.
	r = e.do("GET", "/api/v1/organizations/globex/limits", "outsider", nil).expect(t, 200)
	if got := limitsLine(r.Body["effective"].(map[string]any)); got != "<nil>/month/<nil>/<nil>" {
		t.Errorf("globex effective %s", got)
	}

	// Delete the override: the organization's limits apply again.
	e.do("DELETE", proj, "admin", nil).expect(t, 204)
	r = e.do("GET", proj, "viewer", nil).expect(t, 200)
	if got := limitsLine(r.Body["effective"].(map[string]any)); got != "1e+06/week/<nil>/50000" {
		t.Errorf("effective after delete %s", got)
	}
	if !strings.Contains(string(e.do("DELETE", proj, "admin", nil).expect(t, 404).Raw), "no limits are stored") {
		t.Error("second delete")
	}
	// A money budget: in micro-USD, token_budget null; it wins over the
	// organization's token budget as a whole, unit and period.
	r = e.do("PUT", proj, "admin", map[string]any{"budget": 25000000, "budget_unit": "micro_usd", "budget_period": "day"}).expect(t, 200)
	eff := r.Body["effective"].(map[string]any)
	if got := fmt.Sprintf("%v/%v/%v", eff["budget"], eff["budget_unit"], limitsLine(eff)); got != "2.5e+07/micro_usd/<nil>/day/<nil>/50000" {
		t.Errorf("money budget effective %s", got)
	}
	r = e.do("GET", org, "viewer", nil).expect(t, 200)
	if got := fmt.Sprintf("%v/%v/%v", r.Body["budget"], r.Body["budget_unit"], limitsLine(r.Body)); got != "1e+06/tokens/1e+06/week/<nil>/50000" {
		t.Errorf("org budget %s", got)
	}
	e.do("DELETE", proj, "admin", nil).expect(t, 204)
	e.do("DELETE", org, "admin", nil).expect(t, 204)
	if n := e.countRows(t, "limits"); n != 0 {
		t.Errorf("%d limits rows, want 0", n)
	}
}
