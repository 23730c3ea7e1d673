package gateway

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"

	"github.com/balletplanner/ballet/gateway/llm"
)

// Price is what a model's tokens cost, in US dollars per million tokens,
// each a decimal string with at most six decimals ("3", "0.30"): money is
// never a float. CacheWrite and CacheRead default to Input when empty.
type Price struct {
	Input      string `toml:"input"`
	Output     string `toml:"output"`
	CacheWrite string `toml:"cache_write"`
	CacheRead  string `toml:"cache_read"`
}

// Price sources, as GET /v1/models reports them.
const (
	PriceDefault = "default" // the built-in price of a model of the built-in lists
	PriceConfig  = "config"  // gateway.prices
)

// DefaultPrices are the built-in prices of the models of the built-in
// model lists, the providers' list prices; gateway.prices overrides them
// model by model. The fake's models cost nothing.
var DefaultPrices = map[string]Price{
	"claude-sonnet-5-5":      {Input: "3", Output: "15", CacheWrite: "3.75", CacheRead: "0.30"},
	"claude-opus-4-5":        {Input: "5", Output: "25", CacheWrite: "6.25", CacheRead: "0.50"},
	"claude-sonnet-4-5":      {Input: "3", Output: "15", CacheWrite: "3.75", CacheRead: "0.30"},
	"claude-haiku-4-5":       {Input: "1", Output: "5", CacheWrite: "1.25", CacheRead: "0.10"},
	"gpt-4.1":                {Input: "2", Output: "8", CacheWrite: "2", CacheRead: "0.50"},
	"gpt-4.1-mini":           {Input: "0.40", Output: "1.60", CacheWrite: "0.40", CacheRead: "0.10"},
	"gpt-4o-mini":            {Input: "0.15", Output: "0.60", CacheWrite: "0.15", CacheRead: "0.075"},
	"text-embedding-3-small": {Input: "0.02", Output: "0"},
	"text-embedding-3-large": {Input: "0.13", Output: "0"},
	"claude-demo":            {Input: "0", Output: "0"},
	"fake-embedding":         {Input: "0", Output: "0"},
}

// modelPrice is a Price in micro-USD (millionths of a dollar) per million
// tokens, and where it comes from.
type modelPrice struct {
	input, output, cacheWrite, cacheRead int64
	source                               string
}

// priceTable is the prices of the models that have one.
type priceTable map[string]modelPrice

// newPriceTable merges configured prices over DefaultPrices.
func newPriceTable(configured map[string]Price) (priceTable, error) {
	t := priceTable{}
	for _, layer := range []struct {
		prices map[string]Price
		source string
	}{{DefaultPrices, PriceDefault}, {configured, PriceConfig}} {
		for model, p := range layer.prices {
			mp, err := parsePrice(p)
			if err != nil {
				return nil, fmt.Errorf("gateway.prices.%s.%w", model, err)
			}
			mp.source = layer.source
			t[model] = mp
		}
	}
	return t, nil
}

// maxPriceMicro caps a price: a million dollars per million tokens.
const maxPriceMicro = 1_000_000 * 1_000_000

func parsePrice(p Price) (modelPrice, error) {
	var mp modelPrice
	for _, f := range []struct {
		key, v string
		dst    *int64
	}{{"input", p.Input, &mp.input}, {"output", p.Output, &mp.output}, {"cache_write", p.CacheWrite, &mp.cacheWrite}, {"cache_read", p.CacheRead, &mp.cacheRead}} {
		if f.v == "" {
			if f.key == "input" || f.key == "output" {
				return mp, fmt.Errorf("%s: required (US dollars per million tokens, e.g. \"3.00\")", f.key)
			}
			*f.dst = -1 // the input price, below
			continue
		}
		r, ok := new(big.Rat).SetString(f.v)
		if ok {
			r.Mul(r, big.NewRat(1_000_000, 1))
		}
		if !ok || !r.IsInt() || r.Sign() < 0 || r.Num().Cmp(big.NewInt(maxPriceMicro)) > 0 {
			return mp, fmt.Errorf("%s: must be US dollars per million tokens, a decimal from 0 to 1000000 with at most 6 decimals, got %q", f.key, f.v)
		}
		*f.dst = r.Num().Int64()
	}
	if mp.cacheWrite < 0 {
		mp.cacheWrite = mp.input
	}
	if mp.cacheRead < 0 {
		mp.cacheRead = mp.input
	}
	return mp, nil
}

// cost is what usage u costs at price p, in micro-USD, rounded up.
func (p modelPrice) cost(u llm.Usage) int64 {
	return perMillion(u.InputTokens, p.input, u.OutputTokens, p.output,
		u.CacheCreationInputTokens, p.cacheWrite, u.CacheReadInputTokens, p.cacheRead)
}

// maxCost is the most a call may cost in micro-USD: input tokens at the
// dearest input price (each is read, written to or read from the cache)
// and maxTokens output tokens.
func (p modelPrice) maxCost(input, maxTokens int64) int64 {
	return perMillion(input, max(p.input, p.cacheWrite, p.cacheRead), maxTokens, p.output)
}

// perMillion sums tokens×price pairs (prices per million tokens) and
// divides by a million, rounding up; it saturates at math.MaxInt64.
func perMillion(pairs ...int64) int64 {
	var hi, lo uint64
	for i := 0; i+1 < len(pairs); i += 2 {
		n, price := max(pairs[i], 0), max(pairs[i+1], 0)
		h, l := bits.Mul64(uint64(n), uint64(price))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	if hi >= 1_000_000 { // the quotient would not fit in 64 bits
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, 1_000_000)
	if rem > 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// priceOf is the price of model and whether it has one.
func (s *Server) priceOf(model string) (modelPrice, bool) {
	p, ok := s.prices[model]
	return p, ok
}

// costOf is the cost of a call's usage, nil when its model has no price.
func (s *Server) costOf(model string, u llm.Usage) *int64 {
	p, ok := s.priceOf(model)
	if !ok {
		return nil
	}
	c := p.cost(u)
	return &c
}
