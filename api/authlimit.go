package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/balletplanner/ballet/store"
)

// failureLimiter bounds what failed authentications cost, in process. It
// never refuses a token that authenticates: behind an ingress every user
// shares one address, and one client's bad tokens must not lock the others
// out. Two kinds of token bucket hold AuthConfig.FailureBurst failures,
// refilled at FailuresPerMinute:
//
//   - one per failing token (its SHA-256). Only a token that failed has one,
//     and a token that failed does not become valid, so once its bucket is
//     empty it is refused before any look-up, from every address;
//   - one per client address (clientKey). A token from an address whose
//     bucket is empty is still checked, since it may be valid, but a
//     failure from there is answered 429 with Retry-After instead of 401.
//
// A malformed token (checkTokenShape) costs no look-up at all and counts
// against its address only.
//
// Memory is bounded: addresses and tokens each live in two generations of
// at most limiterCap entries; when the young one is full the old one is
// dropped (a key idle that long has a full bucket anyway).
type failureLimiter struct {
	every rate.Limit
	burst int

	mu     sync.Mutex
	addrs  generations[*rate.Limiter]
	tokens generations[*rate.Limiter]
}

// limiterCap is the size of one generation of each map.
const limiterCap = 10_000

func newFailureLimiter(perMinute, burst int) *failureLimiter {
	return &failureLimiter{every: rate.Limit(float64(perMinute) / 60), burst: burst}
}

// clientKey is the limited unit of an address: the IPv4 address, or the
// /64 of an IPv6 one (a host usually holds a whole /64).
func clientKey(ip string) string {
	parsed := net.ParseIP(ip)
	if parsed == nil || parsed.To4() != nil {
		return ip
	}
	return parsed.Mask(net.CIDRMask(64, 128)).String()
}

func tokenKey(token string) string {
	h := sha256.Sum256([]byte(token))
	return string(h[:])
}

// tokenWait reports whether token failed too often to be looked up again,
// and for how long. It consumes nothing.
func (l *failureLimiter) tokenWait(token string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.tokens.get(tokenKey(token))
	if !ok || lim.TokensAt(now) >= 1 {
		return 0, false
	}
	return l.wait(lim, now), true
}

// failed records a failed authentication from ip with token ("" for a
// malformed one, which is not kept) and reports, for each of the two, how
// long it must wait when its bucket was empty already (0 when it was not).
func (l *failureLimiter) failed(ip, token string, now time.Time) (addrWait, tokenWait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	addrWait = l.take(&l.addrs, clientKey(ip), now)
	if token != "" {
		tokenWait = l.take(&l.tokens, tokenKey(token), now)
	}
	return addrWait, tokenWait
}

// take spends one failure of key's bucket, made full when new; it returns
// the wait when the bucket was empty.
func (l *failureLimiter) take(g *generations[*rate.Limiter], key string, now time.Time) time.Duration {
	lim, ok := g.get(key)
	if !ok {
		lim = rate.NewLimiter(l.every, l.burst)
		g.put(key, lim)
	}
	if lim.AllowN(now, 1) {
		return 0
	}
	return l.wait(lim, now)
}

// wait is how long until lim holds one failure again.
func (l *failureLimiter) wait(lim *rate.Limiter, now time.Time) time.Duration {
	return time.Duration(math.Ceil((1 - lim.TokensAt(now)) / float64(l.every) * float64(time.Second)))
}

// checkToken resolves token, sent from ip, to its subject under the
// failed-authentication limit (failureLimiter): a malformed token is refused
// without a look-up, a token that failed too often is refused with 429
// before one, and a failure past the address's or the token's burst is 429
// (limitedError) rather than 401. A valid token is never refused here.
func (s *Server) checkToken(ctx context.Context, ip, token string) (string, error) {
	now := time.Now()
	if err := s.checkTokenShape(token); err != nil {
		if wait, _ := s.failures.failed(ip, "", now); wait > 0 {
			return "", limitedError(wait, "%s; too many failed authentications from %s", err.Message, ip)
		}
		return "", err
	}
	if wait, limited := s.failures.tokenWait(token, now); limited {
		s.failures.failed(ip, "", now)
		return "", limitedError(wait, "this token failed to authenticate too often")
	}
	subject, err := s.subjectOf(ctx, token)
	if !store.IsCode(err, store.CodeUnauthenticated) || errors.Is(err, errIssuerUnavailable) {
		// Valid, or a failure that says nothing about the token (the
		// database or the OIDC issuer is down).
		return subject, err
	}
	addrWait, tokenWait := s.failures.failed(ip, token, now)
	switch {
	case addrWait > 0:
		return "", limitedError(max(addrWait, tokenWait), "%s; too many failed authentications from %s", store.AsError(err).Message, ip)
	case tokenWait > 0:
		return "", limitedError(tokenWait, "%s; this token failed to authenticate too often", store.AsError(err).Message)
	}
	return "", err
}

// limitedError is the 429 of the failed-authentication limit: the message
// names auth.failure_burst and the wait, which details.retry_after (REST
// also sends it as Retry-After, /rpc in data.retry_after) carries in
// seconds.
func limitedError(wait time.Duration, format string, args ...any) *store.Error {
	secs := retryAfterSeconds(wait)
	e := store.Errorf(store.CodeExhausted, format+" (auth.failure_burst); retry in %ds", append(args, secs)...)
	e.Details = map[string]any{"retry_after": secs}
	return e
}

// retryAfterOf is the Retry-After of an error of limitedError ("" for any
// other error).
func retryAfterOf(err error) string {
	se := store.AsError(err)
	if se == nil || se.Code != store.CodeExhausted {
		return ""
	}
	if secs, ok := se.Details["retry_after"].(int); ok {
		return strconv.Itoa(secs)
	}
	return ""
}

// retryAfterSeconds is a wait in whole seconds, at least one.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// generations is a map bounded to two generations of limiterCap entries.
type generations[V any] struct {
	young, old map[string]V
}

func (g *generations[V]) get(k string) (V, bool) {
	if v, ok := g.young[k]; ok {
		return v, true
	}
	v, ok := g.old[k]
	if ok {
		g.put(k, v)
	}
	return v, ok
}

func (g *generations[V]) put(k string, v V) {
	if g.young == nil {
		g.young = make(map[string]V)
	}
	if _, ok := g.young[k]; !ok && len(g.young) >= limiterCap {
		g.old, g.young = g.young, make(map[string]V)
	}
	g.young[k] = v
}
