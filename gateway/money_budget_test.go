package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// withPrices prices claude-test at $1 per million input tokens (1 micro-USD
// a token, cached or not) and $3 per million output tokens.
func withPrices() envOption {
	return withConfig(func(c *Config) {
		c.Prices = map[string]Price{"claude-test": {Input: "1", Output: "3"}}
	})
}

// TestMoneyBudgetUnderConcurrency sends 200 calls at once against a money
// budget that allows 50: as with a token budget, the calls let through
// pass it by at most one call's most cost, the rest are refused with 403
// naming the budget in dollars, and each usage row records its cost.
func TestMoneyBudgetUnderConcurrency(t *testing.T) {
	t.Parallel()
	body, _ := json.Marshal(hello(false))
	input := inputTokenBound(len(body))
	maxTokens := int64(hello(false).MaxTokens)
	// Each call reserves its most cost (every input token at $1/M, max_tokens
	// at $3/M) and costs exactly that.
	perCall := input*1 + maxTokens*3
	script := `
loop: true
answers:
  - content: [{text: "ok"}]
    usage: {input_tokens: ` + jsonInt(input) + `, output_tokens: 100}
`
	e := newEnv(t, fakellm.MustParse(script), withPrices())
	budget := 50 * perCall
	if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
		TokenBudget: int64p(budget), BudgetUnit: store.BudgetMicroUSD, BudgetPeriod: store.BudgetDay, UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	token := e.token(t)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		messages []string
	)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, out := e.post(t, token, body)
			mu.Lock()
			defer mu.Unlock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusForbidden {
				messages = append(messages, errorOf(t, out).Message)
			}
		}()
	}
	wg.Wait()
	if statuses[200]+statuses[403] != 200 {
		t.Fatalf("statuses = %v", statuses)
	}
	if statuses[200] < 50 || statuses[200] > 51 {
		t.Fatalf("%d calls let through, want 50 (at most one over)", statuses[200])
	}
	mustContain(t, messages[0], "money budget spent", "project DEMO", "of its $"+microUSD(budget), "this day", "resets at")
	var spent int64
	for _, u := range e.usageRows(t, statuses[200]) {
		if u.CostMicroUSD == nil || *u.CostMicroUSD != perCall {
			t.Fatalf("usage row cost = %v, want %d", u.CostMicroUSD, perCall)
		}
		spent += *u.CostMicroUSD
	}
	if spent > budget+perCall {
		t.Fatalf("spent %d micro-USD, over the budget %d + one call's most cost %d", spent, budget, perCall)
	}
	// Redis holds what was spent, on a counter apart from a token budget's.
	used := e.rdb.Get(context.Background(), budgetKey(e, store.BudgetMicroUSD+":day")).Val()
	if used != jsonInt(spent) {
		t.Fatalf("redis money budget = %s, spent %d", used, spent)
	}
	if budgetKey(e, "day") != "" {
		t.Fatal("a money budget charged a token budget counter")
	}
}

// TestMoneyBudgetRefusesUnpricedModels refuses, under a money budget, a
// call for a model without a price, since its cost cannot be bounded; the
// same call passes a token budget, and is recorded without a cost.
func TestMoneyBudgetRefusesUnpricedModels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		unit   string
		status int
	}{
		{"money budget", store.BudgetMicroUSD, http.StatusForbidden},
		{"token budget", store.BudgetTokens, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript))
			if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
				TokenBudget: int64p(1_000_000), BudgetUnit: tt.unit, UpdatedBy: "alice"}); err != nil {
				t.Fatal(err)
			}
			resp, out := e.post(t, e.token(t), hello(false))
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, out)
			}
			if tt.status == http.StatusForbidden {
				d := errorOf(t, out)
				if d.Type != "permission_error" {
					t.Fatalf("error = %+v", d)
				}
				mustContain(t, d.Message, `model "claude-test" has no price`, "money budget limits project DEMO", "gateway.prices")
				if n := len(e.fake.Requests()); n != 0 {
					t.Fatalf("the upstream got %d calls", n)
				}
				return
			}
			if rows := e.usageRows(t, 1); rows[0].CostMicroUSD != nil {
				t.Fatalf("unpriced call cost = %d, want none", *rows[0].CostMicroUSD)
			}
		})
	}
}
