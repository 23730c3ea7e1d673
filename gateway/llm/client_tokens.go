package llm

import (
	"strings"
	"sync"
	"time"
)

// maxClientTokens bounds the tokens a Client keeps: one per principal with
// a running turn.
const maxClientTokens = 4096

// clientTokens keeps the token minted for each principal and hands it out
// again while at least half of its lifetime is left: minting (an HS256
// signature, random bytes, JSON) was a visible part of every model call,
// and the gateway verifies a token it saw before from its own cache. The
// zero value is ready to use.
type clientTokens struct {
	mu      sync.Mutex
	entries map[string]clientToken
}

type clientToken struct {
	token string
	renew time.Time // when half of its lifetime has gone
}

// token returns a token for p valid for at least ttl/2, minted with key
// when none is kept.
func (c *clientTokens) token(key []byte, p Principal, ttl time.Duration) (string, error) {
	k := principalKey(p)
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && now.Before(e.renew) {
		return e.token, nil
	}
	t, err := Mint(key, p, ttl)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= maxClientTokens {
		for k, e := range c.entries {
			if !now.Before(e.renew) {
				delete(c.entries, k)
			}
		}
		if c.entries == nil || len(c.entries) >= maxClientTokens {
			c.entries = make(map[string]clientToken)
		}
	}
	c.entries[k] = clientToken{token: t, renew: now.Add(ttl / 2)}
	c.mu.Unlock()
	return t, nil
}

// principalKey is p's claims as one string; a NUL separates the fields
// (ids and subjects hold none).
func principalKey(p Principal) string {
	var b strings.Builder
	for _, s := range [...]string{p.Subject, p.Organization, p.Project, p.Session, p.ActingFor} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	for _, s := range p.Capabilities {
		b.WriteString(s)
		b.WriteByte(1)
	}
	return b.String()
}
