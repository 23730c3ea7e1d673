package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
)

// reserveScript checks and takes a reservation in one step, so replicas
// never race: requests per minute are refused once the count would pass
// the limit, tokens per minute once the minute's tokens reach the limit
// (429), and a token budget (403) once what its calls used and hold
// reserved leaves no room for the part of the reservation that must fit
// (ARGV[7], a call's input; the rest is its max_tokens). A reservation
// covers all a call may use, so the calls running at once pass a budget by
// at most one call's max_tokens, and a per-minute limit by at most one
// reservation.
var reserveScript = redis.NewScript(`
local rpm, tpm, budget, amount, fit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[7])
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
if budget >= 0 then redis.call('INCRBY', KEYS[3], amount); redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
return {0, 0}
`)

// settleScript replaces a reservation by what the call used, on the windows
// it was taken in (a window that has ended is left alone). Usage beyond the
// reservation (an upstream that reports more than it may) is charged in
// full: the calls after it find the budget spent.
var settleScript = redis.NewScript(`
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, ARGV[1]) end
end
return 0
`)

// limiter enforces budgets and per-minute limits through Redis.
type limiter struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time
}

// reservation is tokens taken before a call, settled after it.
type reservation struct {
	keys   []string // the token keys charged
	amount int64
}

// limitError is a refusal: 429 rate_limit_error or 403 permission_error.
type limitError struct {
	status     int
	message    string
	retryAfter time.Duration
}

func (e *limitError) Error() string { return e.message }

// reserve takes amount tokens and one request against the limits of the
// scope, or returns a *limitError naming the limit and when it resets. Of
// amount, fit must fit in what remains of a token budget (a call's input);
// the rest (its max_tokens) may pass it.
func (l *limiter) reserve(ctx context.Context, scopeID, scopeName string, lim store.Limits, amount, fit int64) (*reservation, error) {
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
	keys := []string{
		base + "rpm:" + minute.Format("200601021504"),
		base + "tpm:" + minute.Format("200601021504"),
		budgetCounterKey(l.prefix, scopeID, lim.BudgetPeriod, now),
	}
	limit := func(v *int64) int64 {
		if v == nil {
			return -1
		}
		return *v
	}
	minuteTTL := (2 * time.Minute).Milliseconds()
	budgetTTL := budgetCounterTTL(now, lim.BudgetPeriod).Milliseconds()
	res, err := reserveScript.Run(ctx, l.rdb, keys,
		limit(lim.RequestsPerMinute), limit(lim.TokensPerMinute), limit(lim.TokenBudget), amount, minuteTTL, budgetTTL, fit).Int64Slice()
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
		room := ""
		if res[1] < *lim.TokenBudget {
			room = fmt.Sprintf(", too few for a call whose input may take %d", fit)
		}
		return nil, &limitError{status: http.StatusForbidden, retryAfter: periodEnd.Sub(now),
			message: fmt.Sprintf("token budget spent: %s has used %d of its %d tokens this %s%s; resets at %s",
				scopeName, res[1], *lim.TokenBudget, lim.BudgetPeriod, room, periodEnd.Format(time.RFC3339))}
	}
	r := &reservation{amount: amount}
	if lim.TokensPerMinute != nil {
		r.keys = append(r.keys, keys[1])
	}
	if lim.TokenBudget != nil {
		r.keys = append(r.keys, keys[2])
	}
	return r, nil
}

// settle replaces the reservation by the tokens used.
func (l *limiter) settle(ctx context.Context, r *reservation, used int64) error {
	if r == nil || len(r.keys) == 0 || used == r.amount {
		return nil
	}
	if err := settleScript.Run(ctx, l.rdb, r.keys, used-r.amount).Err(); err != nil {
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
