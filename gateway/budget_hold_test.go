package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// TestBudgetHoldsWhenUsageExceedsMaxTokens sends 200 calls at once through
// the gateway's handler to a fake upstream that reports, for each, more
// tokens than its max_tokens (a whole input as long as the body, and all of
// max_tokens): whatever order the calls run in, the tokens spent pass the
// budget by at most one call's max_tokens, and every refused call gets the
// documented budget refusal.
func TestBudgetHoldsWhenUsageExceedsMaxTokens(t *testing.T) {
	t.Parallel()
	const (
		calls     = 200
		maxTokens = 40
		budget    = 2000
	)
	tests := []struct {
		name     string
		provider string
		model    string
		stream   bool
	}{
		{"anthropic", store.ProviderAnthropic, "claude-test", false},
		{"anthropic stream", store.ProviderAnthropic, "claude-test", true},
		{"openai", store.ProviderOpenAI, "gpt-test", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := hello(tt.stream)
			req.Model, req.MaxTokens = tt.model, maxTokens
			body, _ := json.Marshal(req)
			// A token is at least a byte of the body: no honest upstream
			// reports more input than this, or more output than max_tokens.
			input := int64(len(body))
			perCall := input + maxTokens
			e := newEnv(t, fakellm.MustParse(`
loop: true
answers:
  - content: [{text: "ok"}]
    latency: 20ms
    usage: {input_tokens: `+strconv.FormatInt(input, 10)+`, output_tokens: `+strconv.Itoa(maxTokens)+`}
`), withProvider(tt.provider))
			if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
				TokenBudget: int64p(budget), BudgetPeriod: store.BudgetDay, UpdatedBy: "alice"}); err != nil {
				t.Fatal(err)
			}
			token := e.token(t)
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				statuses = map[int]int{}
				refusals []refusalSeen
			)
			for range calls {
				wg.Go(func() {
					resp, out := e.post(t, token, body)
					mu.Lock()
					defer mu.Unlock()
					statuses[resp.StatusCode]++
					if resp.StatusCode != http.StatusOK {
						refusals = append(refusals, refusalSeen{resp.Header.Get("Retry-After"), out})
					}
				})
			}
			wg.Wait()
			if statuses[http.StatusOK]+statuses[http.StatusForbidden] != calls || statuses[http.StatusOK] == 0 {
				t.Fatalf("statuses = %v, want only 200 and 403", statuses)
			}
			for _, r := range refusals {
				d := errorOf(t, r.body)
				if d.Type != llm.ErrPermission || r.retryAfter == "" || r.retryAfter == "0" {
					t.Fatalf("refusal type %s, Retry-After %q: %s", d.Type, r.retryAfter, r.body)
				}
				mustContain(t, d.Message, "token budget spent", "project DEMO", "this day", "resets at")
			}
			var spent int64
			for _, u := range e.usageRows(t, statuses[http.StatusOK]) {
				spent += u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
			}
			if spent > budget+maxTokens {
				t.Fatalf("%d calls spent %d tokens (%d each): over the budget %d + one call's max_tokens %d",
					statuses[http.StatusOK], spent, perCall, budget, maxTokens)
			}
			if spent+perCall <= budget {
				t.Fatalf("%d calls spent %d tokens (%d each) and the rest were refused: the budget %d had room for more",
					statuses[http.StatusOK], spent, perCall, budget)
			}
			// Redis holds what was used, not what was reserved.
			if used := e.rdb.Get(context.Background(), budgetKey(e, "day")).Val(); used != jsonInt(spent) {
				t.Fatalf("redis budget = %s, spent %d", used, spent)
			}
		})
	}
}

// TestBudgetChargesUsageBeyondTheReservation: a call whose upstream reports
// more than the gateway reserved for it is charged all of it, so the calls
// after it are refused.
func TestBudgetChargesUsageBeyondTheReservation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
loop: true
answers:
  - content: [{text: "ok"}]
    usage: {input_tokens: 5000, output_tokens: 40, cache_read_input_tokens: 100}
`))
	if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
		TokenBudget: int64p(1000), BudgetPeriod: store.BudgetDay, UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	token := e.token(t)
	if resp, out := e.post(t, token, hello(false)); resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d %s", resp.StatusCode, out)
	}
	resp, out := e.post(t, token, hello(false))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("second call: %d %s", resp.StatusCode, out)
	}
	mustContain(t, errorOf(t, out).Message, "token budget spent: project DEMO has used 5140 of its 1000 tokens this day")
}

// refusalSeen is a refused call's Retry-After and body.
type refusalSeen struct {
	retryAfter string
	body       []byte
}
