package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// TestBudgetMetrics: ballet_llm_budgets counts the budgeted scopes by how
// much of their budget the calls used, the way the limiter counts them: a
// project at 90% is near, one that spent all is exhausted, one that
// inherits its organization's budget and the organization itself are ok,
// and a scope without a budget is not counted.
func TestBudgetMetrics(t *testing.T) {
	t.Parallel()
	body, _ := json.Marshal(hello(false))
	estimate := int64(estimateTokens(len(body)))
	perCall := estimate + int64(hello(false).MaxTokens)
	e := newEnv(t, fakellm.MustParse(`
loop: true
answers:
  - content: [{text: "ok"}]
    usage: {input_tokens: `+jsonInt(estimate)+`, output_tokens: 100}
`))
	ctx := context.Background()
	project := func(key string) string {
		var id string
		if err := e.db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, $2, $2) RETURNING id::text`,
			e.org, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	spent := project("SPENT")
	project("INHERITS") // takes the organization's budget
	var other string
	if err := e.db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ('globex', 'Globex') RETURNING id::text`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	for _, l := range []store.Limits{
		{OrganizationID: e.org, TokenBudget: int64p(1_000_000), BudgetPeriod: store.BudgetMonth},
		{OrganizationID: e.org, ProjectID: e.project, TokenBudget: int64p(perCall * 10 / 9), BudgetPeriod: store.BudgetDay},
		{OrganizationID: e.org, ProjectID: spent, TokenBudget: int64p(perCall), BudgetPeriod: store.BudgetWeek},
		{OrganizationID: other, RequestsPerMinute: int64p(100)},
	} {
		l.UpdatedBy = "alice"
		if _, err := e.db.PutLimits(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	if err := e.srv.budgets.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mustContain(t, scrape(), `ballet_llm_budgets{state="ok"} 4`, `ballet_llm_budgets{state="near"} 0`, `ballet_llm_budgets{state="exhausted"} 0`)

	for _, p := range []string{e.project, spent} {
		tok, err := e.client.Token(llm.Principal{Organization: e.org, Project: p, Session: "6f1c2a52-7b1e-4c55-9b8e-2f0d7b1b1a01", ActingFor: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if res, out := e.post(t, tok, body); res.StatusCode != http.StatusOK {
			t.Fatalf("call for project %s: %d %s", p, res.StatusCode, out)
		}
	}
	if err := e.srv.budgets.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got := scrape()
	mustContain(t, got, `ballet_llm_budgets{state="ok"} 2`, `ballet_llm_budgets{state="near"} 1`, `ballet_llm_budgets{state="exhausted"} 1`)
	// The first pass reconciled the counters with the usage in Postgres.
	mustContain(t, got, `ballet_llm_budget_reconciles_total{reason="master"}`, `ballet_llm_budget_reconciles_total{reason="missing"}`)
	if strings.Count(got, "ballet_llm_budgets{") != 3 {
		t.Fatalf("want three budget series:\n%s", got)
	}
}

// TestBudgetState: near from 80% of the budget, exhausted once all is used
// (the limiter then refuses), a zero budget exhausted from the start.
func TestBudgetState(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		used, budget int64
		want         string
	}{{0, 100, "ok"}, {79, 100, "ok"}, {80, 100, "near"}, {99, 100, "near"}, {100, 100, "exhausted"}, {150, 100, "exhausted"}, {0, 0, "exhausted"}} {
		if got := budgetState(tt.used, tt.budget); got != tt.want {
			t.Errorf("budgetState(%d, %d) = %s, want %s", tt.used, tt.budget, got, tt.want)
		}
	}
}
