package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// reserveScript checks and takes a reservation in one step, so replicas
// never race: requests per minute are refused once the count would pass
// the limit, tokens per minute once the minute's tokens reach the limit
// (429), and a budget (403) once what its calls used and hold reserved
// leaves no room for the part of the reservation that must fit (ARGV[7], a
// call's input, in the budget's unit; the rest is its max_tokens). ARGV[4]
// is the reservation in tokens, ARGV[8] in the budget's unit (tokens, or
// micro-USD for a money budget). A reservation covers all a call may use,
// so the calls running at once pass a budget by at most one call's
// max_tokens (or their cost), and a per-minute limit by at most one
// reservation.
var reserveScript = redis.NewScript(`
local rpm, tpm, budget, amount, fit, charge = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[7]), tonumber(ARGV[8])
if budget >= 0 then
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  if used >= budget or used + fit > budget then return {3, used} end
end
if rpm >= 0 then
  local n = tonumber(redis.call('GET', KEYS[1]) or '0')
  if n + 1 > rpm then return {1, n} end
end
if tpm >= 0 then
  local used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used >= tpm then return {2, used} end
end
if rpm >= 0 then redis.call('INCR', KEYS[1]); redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
if tpm >= 0 then redis.call('INCRBY', KEYS[2], amount); redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
if budget >= 0 then redis.call('INCRBY', KEYS[3], charge); redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
return {0, 0}
`)

// settleScript replaces a reservation by what the call used, on the windows
// it was taken in (a window that has ended is left alone): KEYS[i] moves by
// ARGV[i]. Usage beyond the reservation (an upstream that reports more than
// it may) is charged in full: the calls after it find the budget spent.
var settleScript = redis.NewScript(`
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, ARGV[i]) end
end
return 0
`)

// limiter enforces budgets and per-minute limits through Redis: it
// reserves what a call may use before the call, refusing the calls the
// limits leave no room for, and settles the reservation on the call's
// usage after it.
type limiter struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time
	// prices are what a money budget charges a call's tokens at.
	prices priceTable
	log    *slog.Logger
}

// charge is what a call may use, reserved before it: tokens (fit of them
// must fit in a token budget's remainder), and for a money budget their
// most cost in micro-USD (costFit of it must fit).
type charge struct {
	tokens, fit   int64
	cost, costFit int64
}

// reservation is what was taken before a call, settled after it.
type reservation struct {
	tpmKey    string // the tokens-per-minute key charged, or ""
	tokens    int64
	budgetKey string // the budget key charged, or ""
	money     bool   // the budget counts micro-USD
	budget    int64  // what the budget key was charged
}

// charged reports whether r holds anything to settle in Redis.
func (r *reservation) charged() bool {
	return r != nil && (r.tpmKey != "" || r.budgetKey != "")
}

// limitError is a refusal: 429 rate_limit_error or 403 permission_error.
type limitError struct {
	status     int
	message    string
	retryAfter time.Duration
}

func (e *limitError) Error() string { return e.message }

// take takes ch and one request against the limits of the scope, or
// returns a *limitError naming the limit and when it resets.
func (l *limiter) take(ctx context.Context, scopeID, scopeName string, lim store.Limits, ch charge) (*reservation, error) {
	if lim.Unlimited() {
		return &reservation{}, nil
	}
	if l.rdb == nil {
		return nil, fmt.Errorf("limits are set for %s but the gateway has no Redis", scopeName)
	}
	now := l.now().UTC()
	minute := now.Truncate(time.Minute)
	nextMinute := minute.Add(time.Minute)
	_, periodEnd := budgetPeriod(now, lim.BudgetPeriod)
	base := l.prefix + "{" + scopeID + "}:"
	money := lim.BudgetUnit == store.BudgetMicroUSD
	keys := []string{
		base + "rpm:" + minute.Format("200601021504"),
		base + "tpm:" + minute.Format("200601021504"),
		budgetCounterKey(l.prefix, scopeID, lim.BudgetPeriod, lim.BudgetUnit, now),
	}
	limit := func(v *int64) int64 {
		if v == nil {
			return -1
		}
		return *v
	}
	budgetCharge, fit := ch.tokens, ch.fit
	if money {
		budgetCharge, fit = ch.cost, ch.costFit
	}
	minuteTTL := (2 * time.Minute).Milliseconds()
	budgetTTL := budgetCounterTTL(now, lim.BudgetPeriod).Milliseconds()
	res, err := reserveScript.Run(ctx, l.rdb, keys,
		limit(lim.RequestsPerMinute), limit(lim.TokensPerMinute), limit(lim.TokenBudget), ch.tokens, minuteTTL, budgetTTL, fit, budgetCharge).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("reserve: %w", err)
	}
	switch res[0] {
	case 1:
		return nil, &limitError{status: http.StatusTooManyRequests, retryAfter: nextMinute.Sub(now),
			message: fmt.Sprintf("rate limit exceeded: %s allows %d requests per minute; resets at %s",
				scopeName, *lim.RequestsPerMinute, nextMinute.Format(time.RFC3339))}
	case 2:
		return nil, &limitError{status: http.StatusTooManyRequests, retryAfter: nextMinute.Sub(now),
			message: fmt.Sprintf("rate limit exceeded: %s allows %d tokens per minute and has used %d; resets at %s",
				scopeName, *lim.TokensPerMinute, res[1], nextMinute.Format(time.RFC3339))}
	case 3:
		return nil, &limitError{status: http.StatusForbidden, retryAfter: periodEnd.Sub(now),
			message: budgetSpentMessage(scopeName, lim, res[1], fit, periodEnd)}
	}
	r := &reservation{tokens: ch.tokens, money: money, budget: budgetCharge}
	if lim.TokensPerMinute != nil {
		r.tpmKey = keys[1]
	}
	if lim.TokenBudget != nil {
		r.budgetKey = keys[2]
	}
	return r, nil
}

// reserve takes a request and what a call for model may use against the
// scope's limits: input tokens, which must fit in what remains of a budget
// when inputMustFit, and output tokens, which may pass it. A money budget
// is charged their most cost at model's price; a model without a price is
// refused there. A refusal names the limit (429, or 403 for a spent budget).
func (l *limiter) reserve(ctx context.Context, sc *scope, model string, input, output int64, inputMustFit bool) (*reservation, *refusal) {
	if sc.Limits.Unlimited() {
		return nil, nil // nothing to reserve, nothing to settle
	}
	ch := charge{tokens: input + output}
	if inputMustFit {
		ch.fit = input
	}
	if sc.Limits.TokenBudget != nil && sc.Limits.BudgetUnit == store.BudgetMicroUSD {
		p, ok := l.prices[model]
		if !ok {
			return nil, &refusal{status: http.StatusForbidden, typ: llm.ErrPermission, code: "model_not_priced",
				msg: "model " + strconv.Quote(model) + " has no price, and a money budget limits " + sc.name() +
					": the operator sets its price in gateway.prices"}
		}
		ch.cost = p.maxCost(input, output)
		if inputMustFit {
			ch.costFit = p.maxCost(input, 0)
		}
	}
	res, err := l.take(ctx, sc.id(), sc.name(), sc.Limits, ch)
	if err == nil {
		return res, nil
	}
	var le *limitError
	if errors.As(err, &le) {
		r := &refusal{status: le.status, typ: llm.ErrRateLimit, msg: le.message, code: "rate_limit_exceeded",
			retryAfter: retryAfterSeconds(le.retryAfter)}
		if le.status == http.StatusForbidden {
			r.typ, r.code = llm.ErrPermission, "budget_exceeded"
		}
		return nil, r
	}
	l.log.ErrorContext(ctx, "reserve limits", slog.String("scope", sc.name()), slog.Any("error", err))
	return nil, refuse(http.StatusServiceUnavailable, llm.ErrOverloaded, "gateway: rate limiter unavailable")
}

// budgetSpentMessage says that scope's budget is spent: used of it this
// period, and too little left for a call that must fit fit.
func budgetSpentMessage(scopeName string, lim store.Limits, used, fit int64, periodEnd time.Time) string {
	if lim.BudgetUnit == store.BudgetMicroUSD {
		room := ""
		if used < *lim.TokenBudget {
			room = ", too little for a call whose input may cost $" + microUSD(fit)
		}
		return fmt.Sprintf("money budget spent: %s has spent $%s of its $%s this %s%s; resets at %s",
			scopeName, microUSD(used), microUSD(*lim.TokenBudget), lim.BudgetPeriod, room, periodEnd.Format(time.RFC3339))
	}
	room := ""
	if used < *lim.TokenBudget {
		room = fmt.Sprintf(", too few for a call whose input may take %d", fit)
	}
	return fmt.Sprintf("token budget spent: %s has used %d of its %d tokens this %s%s; resets at %s",
		scopeName, used, *lim.TokenBudget, lim.BudgetPeriod, room, periodEnd.Format(time.RFC3339))
}

// microUSD writes micro-USD as dollars with six decimals.
func microUSD(v int64) string {
	return fmt.Sprintf("%d.%06d", v/1_000_000, v%1_000_000)
}

// settle replaces the reservation by what the call used: tokens, and cost
// in micro-USD for a money budget.
func (l *limiter) settle(ctx context.Context, r *reservation, tokens, cost int64) error {
	if r == nil {
		return nil
	}
	var keys []string
	var deltas []any
	if r.tpmKey != "" && tokens != r.tokens {
		keys, deltas = append(keys, r.tpmKey), append(deltas, tokens-r.tokens)
	}
	used := tokens
	if r.money {
		used = cost
	}
	if r.budgetKey != "" && used != r.budget {
		keys, deltas = append(keys, r.budgetKey), append(deltas, used-r.budget)
	}
	if len(keys) == 0 {
		return nil
	}
	if err := settleScript.Run(ctx, l.rdb, keys, deltas...).Err(); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}

// inputTokenBound is the most input tokens a Messages body of n bytes may
// cost: a token is at least one byte of the text the model reads, and the
// body holds that text and more (names, quotes, escapes). What the body
// only points to (a file or an image by reference, a server tool's
// results) is beyond it: such usage is charged when the call settles.
func inputTokenBound(n int) int64 { return int64(n) }

// budgetPeriod returns the UTC bounds of the day, ISO week or month of t.
func budgetPeriod(t time.Time, period string) (time.Time, time.Time) {
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case store.BudgetDay:
		return day, day.AddDate(0, 0, 1)
	case store.BudgetWeek:
		start := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		return start, start.AddDate(0, 0, 7)
	}
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// budgetCounterTTL is how long a budget counter set at now lives: to the
// end of its period and an hour more, so that no clock skew between
// gateways ends it early.
func budgetCounterTTL(now time.Time, period string) time.Duration {
	_, end := budgetPeriod(now, period)
	return end.Sub(now) + time.Hour
}

// retryAfterSeconds rounds a wait up to whole seconds for Retry-After.
func retryAfterSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
