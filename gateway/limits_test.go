package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

func int64p(v int64) *int64 { return &v }

// TestBudgetUnderConcurrency sends 200 calls at once against a budget that
// allows 50: the budget is passed by at most one call's max_tokens, and the
// rest are refused with 403 naming the budget.
func TestBudgetUnderConcurrency(t *testing.T) {
	t.Parallel()
	body, _ := json.Marshal(hello(false))
	// Each call reserves the most it may use (an input token per byte of
	// its body, and max_tokens) and uses exactly that.
	input := inputTokenBound(len(body))
	perCall := input + int64(hello(false).MaxTokens)
	script := `
loop: true
answers:
  - content: [{text: "ok"}]
    usage: {input_tokens: ` + jsonInt(input) + `, output_tokens: 100}
`
	e := newEnv(t, fakellm.MustParse(script))
	budget := 50 * perCall
	if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
		TokenBudget: int64p(budget), BudgetPeriod: store.BudgetDay, UpdatedBy: "alice"}); err != nil {
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
	mustContain(t, messages[0], "token budget spent", "project DEMO", "this day", "resets at")
	var spent int64
	for _, u := range e.usageRows(t, statuses[200]) {
		spent += u.InputTokens + u.OutputTokens
	}
	if spent > budget+int64(hello(false).MaxTokens) {
		t.Fatalf("spent %d tokens, over the budget %d + one call's max_tokens %d", spent, budget, hello(false).MaxTokens)
	}
	// Redis holds what was used, not what was reserved.
	used := e.rdb.Get(context.Background(), budgetKey(e, "day")).Val()
	if used != jsonInt(spent) {
		t.Fatalf("redis budget = %s, spent %d", used, spent)
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

func budgetKey(e *env, period string) string {
	var keys []string
	iter := e.rdb.Scan(context.Background(), 0, e.cfg.RedisPrefix+"*budget:"+period+"*", 100).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if len(keys) != 1 {
		return ""
	}
	return keys[0]
}

func TestPerMinuteLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits store.Limits
		ok     int
		want   string
	}{
		{"requests", store.Limits{RequestsPerMinute: int64p(2)}, 2, "allows 2 requests per minute"},
		// Each call reserves about 130 tokens and uses 19: the third finds 38 used.
		{"tokens", store.Limits{TokensPerMinute: int64p(30)}, 2, "allows 30 tokens per minute and has used 38"},
		{"organization default", store.Limits{RequestsPerMinute: int64p(1)}, 1, "allows 1 requests per minute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript))
			l := tt.limits
			l.OrganizationID, l.UpdatedBy = e.org, "alice"
			if tt.name != "organization default" {
				l.ProjectID = e.project
			}
			if _, err := e.db.PutLimits(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			token := e.token(t)
			for i := range tt.ok {
				if resp, body := e.post(t, token, hello(false)); resp.StatusCode != 200 {
					t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
				}
			}
			resp, body := e.post(t, token, hello(false))
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status = %d: %s", resp.StatusCode, body)
			}
			d := errorOf(t, body)
			if d.Type != llm.ErrRateLimit {
				t.Fatalf("type = %s", d.Type)
			}
			mustContain(t, d.Message, tt.want, "resets at")
			if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Fatalf("Retry-After = %q", ra)
			}
			if got := e.counter(t, "ballet_llm_requests_total", map[string]string{"status": "429", "project": "DEMO"}); got != 1 {
				t.Fatalf("requests_total{status=429} = %v", got)
			}
		})
	}
}
