package gateway

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/ttlcache"
)

// maxCachedTokens bounds the verified tokens kept: a worker's token serves
// all the calls of its turn, so a few thousand cover every running turn.
const maxCachedTokens = 4096

// tokenCache keeps the principals of gateway tokens verified before, until
// their expiry, so that a token's signature is checked once, not on every
// call. A token is the same string for as long as it is valid, and its
// claims cannot change without its signature changing; failures are never
// kept.
type tokenCache struct {
	c *ttlcache.Cache[llm.Principal]
}

// newTokenCache is an empty tokenCache of at most maxCachedTokens, reading
// the time from now (time.Now when nil).
func newTokenCache(now func() time.Time) tokenCache {
	return tokenCache{c: ttlcache.New[llm.Principal](maxCachedTokens, now)}
}

// verify is keys.Verify(token), from the cache while the token has not
// expired.
func (c tokenCache) verify(keys llm.Keyring, token string) (llm.Principal, error) {
	if p, ok := c.c.Get(token); ok {
		p.Capabilities = slices.Clone(p.Capabilities)
		return p, nil
	}
	p, err := keys.Verify(token)
	if err != nil {
		return p, err
	}
	if exp, ok := tokenExpiry(token); ok {
		kept := p
		kept.Capabilities = slices.Clone(p.Capabilities)
		c.c.Set(token, kept, exp)
	}
	return p, nil
}

// tokenExpiry reads the exp claim of a token llm.VerifyToken accepted (so
// its payload is the signer's); ok is false when there is none to read.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	secs, err := claims.Exp.Float64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(min(secs, 1<<40)), 0), true
}
