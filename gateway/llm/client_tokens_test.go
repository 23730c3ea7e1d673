package llm

import (
	"testing"
	"time"
)

// A client sends the same token for a principal while half of its lifetime
// is left, a token of its own to every other principal, and mints a new
// one once the half is gone.
func TestClientReusesATokenForHalfItsLife(t *testing.T) {
	t.Parallel()
	key := []byte("k")
	c := NewClient("http://gateway", key, nil)
	alice := Principal{Organization: "0193f9c4-7a8e-7b3c-9d2e-5f6a7b8c9d0e", Session: "s1", ActingFor: "alice"}
	first, err := c.Token(alice)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Token(alice); again != first {
		t.Error("a second call minted a new token")
	}
	others := map[string]Principal{
		"session":      {Organization: alice.Organization, Session: "s2", ActingFor: "alice"},
		"acting for":   {Organization: alice.Organization, Session: "s1", ActingFor: "bob"},
		"capabilities": {Organization: alice.Organization, Session: "s1", ActingFor: "alice", Capabilities: []string{"other"}},
		"project":      {Organization: alice.Organization, Session: "s1", Project: "0193f9c4-7a8e-7b3c-9d2e-5f6a7b8c9d0f", ActingFor: "alice"},
	}
	for name, p := range others {
		tok, err := c.Token(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := VerifyToken(key, tok)
		if err != nil || tok == first || got.Session != p.Session || got.ActingFor != p.ActingFor {
			t.Errorf("%s: token for %+v, %v (the first principal's: %v)", name, got, err, tok == first)
		}
	}
	// Half of the lifetime gone: a new token.
	c.tokens.mu.Lock()
	e := c.tokens.entries[principalKey(alice)]
	e.renew = time.Now().Add(-time.Second)
	c.tokens.entries[principalKey(alice)] = e
	c.tokens.mu.Unlock()
	if renewed, _ := c.Token(alice); renewed == first {
		t.Error("a token past half its lifetime was sent again")
	}
}

// A full cache forgets what has gone past renewal, or everything.
func TestClientTokensAreBounded(t *testing.T) {
	t.Parallel()
	var c clientTokens
	for i := range maxClientTokens + 10 {
		if _, err := c.token([]byte("k"), Principal{Organization: "o", Session: string(rune('a'+i%26)) + time.Duration(i).String()}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.entries); n > maxClientTokens {
		t.Fatalf("%d tokens kept, at most %d", n, maxClientTokens)
	}
}
