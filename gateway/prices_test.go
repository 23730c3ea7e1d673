package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
)

func TestConfigValidatesPrices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		prices map[string]Price
		want   string // "" for valid
	}{
		{"none", nil, ""},
		{"full", map[string]Price{"m": {Input: "3", Output: "15.00", CacheWrite: "3.75", CacheRead: "0.000001"}}, ""},
		{"free", map[string]Price{"m": {Input: "0", Output: "0"}}, ""},
		{"no input", map[string]Price{"m": {Output: "1"}}, `gateway.prices.m.input: required`},
		{"no output", map[string]Price{"m": {Input: "1"}}, `gateway.prices.m.output: required`},
		{"seven decimals", map[string]Price{"m": {Input: "0.0000001", Output: "1"}}, `gateway.prices.m.input: must be US dollars per million tokens`},
		{"negative", map[string]Price{"m": {Input: "1", Output: "-1"}}, `gateway.prices.m.output: must be`},
		{"not a number", map[string]Price{"m": {Input: "1", Output: "1", CacheRead: "$1"}}, `gateway.prices.m.cache_read: must be`},
		{"too dear", map[string]Price{"m": {Input: "1000000.000001", Output: "1"}}, `gateway.prices.m.input: must be`},
		{"bad model name", map[string]Price{"a b": {Input: "1", Output: "1"}}, `gateway.prices: model: only letters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			c.Prices = tt.prices
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCostIsExactAndRoundsUp(t *testing.T) {
	t.Parallel()
	sonnet, err := parsePrice(Price{Input: "3", Output: "15", CacheWrite: "3.75", CacheRead: "0.30"})
	if err != nil {
		t.Fatal(err)
	}
	cheap, err := parsePrice(Price{Input: "0.000001", Output: "0.000003"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		price modelPrice
		u     llm.Usage
		want  int64
	}{
		{"nothing", sonnet, llm.Usage{}, 0},
		// 1M input at $3, 1M output at $15, 1M cache writes at $3.75, 1M cache reads at $0.30.
		{"a million each", sonnet, llm.Usage{InputTokens: 1e6, OutputTokens: 1e6, CacheCreationInputTokens: 1e6, CacheReadInputTokens: 1e6}, 22_050_000},
		{"one token", sonnet, llm.Usage{InputTokens: 1}, 3},
		{"a fraction rounds up", cheap, llm.Usage{InputTokens: 1, OutputTokens: 1}, 1},
		{"cache prices default to input", cheap, llm.Usage{CacheReadInputTokens: 1e6}, 1},
		{"saturates", sonnet, llm.Usage{OutputTokens: math.MaxInt64}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.price.cost(tt.u); got != tt.want {
				t.Fatalf("cost = %d, want %d", got, tt.want)
			}
		})
	}
	// The most a call may cost reads every input token at the dearest input price.
	if got := sonnet.maxCost(1000, 100); got != 1000*3.75+100*15 {
		t.Fatalf("max cost = %d", got)
	}
}

// TestUsageRowsCarryTheirCost calls through the Anthropic SDK with cache
// usage: the row records the cost at the configured price; a model of the
// built-in lists is priced by default; GET /v1/models shows both prices
// and where they come from.
func TestUsageRowsCarryTheirCost(t *testing.T) {
	t.Parallel()
	script := `
loop: true
answers:
  - content: [{text: "ok"}]
    usage: {input_tokens: 1000, output_tokens: 200, cache_creation_input_tokens: 400, cache_read_input_tokens: 3000}
`
	e := newEnv(t, fakellm.MustParse(script), withConfig(func(c *Config) {
		c.AnthropicModels = []string{"claude-test", "claude-haiku-4-5"}
		c.Prices = map[string]Price{"claude-test": {Input: "2", Output: "10", CacheWrite: "2.50", CacheRead: "0.20"}}
	}))
	client := e.anthropicSDK(t)
	ctx := context.Background()
	for _, model := range []string{"claude-test", "claude-haiku-4-5", "claude-unpriced"} {
		if _, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 500,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}); err != nil {
			t.Fatal(err)
		}
	}
	costs := map[string]string{}
	for _, u := range e.usageRows(t, 3) {
		costs[u.Model] = "none"
		if u.CostMicroUSD != nil {
			costs[u.Model] = jsonInt(*u.CostMicroUSD)
		}
	}
	// 1000×2 + 200×10 + 400×2.5 + 3000×0.2 = 5600 micro-USD; at haiku's
	// default $1/$5/$1.25/$0.10: 1000 + 1000 + 500 + 300 = 2800.
	if got := costs["claude-test"] + " " + costs["claude-haiku-4-5"] + " " + costs["claude-unpriced"]; got != "5600 2800 none" {
		t.Fatalf("costs = %s, want 5600 2800 none", got)
	}
	resp, body := e.send(t, http.MethodGet, "/v1/models", e.token(t), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("models: %d %s", resp.StatusCode, body)
	}
	var page struct {
		Data []struct {
			ID          string            `json:"id"`
			Price       map[string]string `json:"price"`
			PriceSource string            `json:"price_source"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range page.Data {
		got = append(got, m.ID+":"+m.PriceSource+":"+m.Price["input"]+"/"+m.Price["output"]+"/"+m.Price["cache_write"]+"/"+m.Price["cache_read"])
	}
	if want := "claude-test:config:2/10/2.5/0.2 claude-haiku-4-5:default:1/5/1.25/0.1"; strings.Join(got, " ") != want {
		t.Fatalf("models = %v, want %s", got, want)
	}
}
