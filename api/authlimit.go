package api

import (
	"crypto/sha256"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// failureLimiter limits failed authentications per client address, in
// process: each address has a token bucket of AuthConfig.FailureBurst
// failures refilled at FailuresPerMinute. An address whose bucket is empty
// is answered 429 without a look-up, except for a token that authenticated
// recently in this process, so that a user sharing an address with an
// attacker keeps working. Addresses of other clients are never affected.
//
// Memory is bounded: addresses and good tokens each live in two
// generations of at most limiterCap entries; when the young one is full the
// old one is dropped (an address idle that long has a full bucket anyway).
type failureLimiter struct {
	every rate.Limit
	burst int

	mu        sync.Mutex
	addrs     generations[*rate.Limiter]
	goodUntil generations[time.Time]
}

// limiterCap is the size of one generation of each map.
const limiterCap = 10_000

// goodTokenTTL is how long a token that authenticated passes a limited address.
const goodTokenTTL = 10 * time.Minute

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

// blocked reports whether requests of ip with token must wait, and for how
// long. It consumes nothing.
func (l *failureLimiter) blocked(ip, token string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.addrs.get(clientKey(ip))
	if !ok || lim.TokensAt(now) >= 1 {
		return 0, false
	}
	if until, ok := l.goodUntil.get(tokenKey(token)); ok && now.Before(until) {
		return 0, false
	}
	wait := time.Duration(math.Ceil((1 - lim.TokensAt(now)) / float64(l.every) * float64(time.Second)))
	return wait, true
}

// failed records a failed authentication of ip.
func (l *failureLimiter) failed(ip string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := clientKey(ip)
	lim, ok := l.addrs.get(key)
	if !ok {
		lim = rate.NewLimiter(l.every, l.burst)
		l.addrs.put(key, lim)
	}
	lim.AllowN(now, 1)
}

// succeeded remembers token as good, so that it passes a limited address.
func (l *failureLimiter) succeeded(token string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.goodUntil.put(tokenKey(token), now.Add(goodTokenTTL))
}

// retryAfter formats a wait as the whole seconds of a Retry-After header.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
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
