package gateway

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
)

func TestTokenCache(t *testing.T) {
	t.Parallel()
	key := []byte(randomHex(32))
	p := llm.Principal{Subject: "planner:s", Organization: "6f1c2a52-7b1e-4c55-9b8e-2f0d7b1b1a01", Capabilities: []string{llm.CapabilityInvoke}}
	token, err := llm.Mint(key, p, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want, err := llm.VerifyToken(key, token)
	if err != nil {
		t.Fatal(err)
	}
	var c tokenCache
	for i := range 2 {
		got, err := c.verify(llm.Keyring{key}, token)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("verify %d = %+v, %v; want %+v", i, got, err, want)
		}
		got.Capabilities[0] = "changed" // a caller's copy, not the cache's
	}
	if n := len(c.entries); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
	if exp := c.entries[token].expires; exp.Before(time.Now().Add(50*time.Second)) || exp.After(time.Now().Add(time.Minute)) {
		t.Errorf("kept until %v, want the token's expiry in about a minute", exp)
	}

	// A failure is not kept; a kept token past its expiry is verified again.
	other, err := llm.Mint([]byte(randomHex(32)), p, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.verify(llm.Keyring{key}, other); !errors.Is(err, llm.ErrInvalidToken) {
		t.Fatalf("foreign token: %v", err)
	}
	if _, kept := c.entries[other]; kept {
		t.Fatal("a refused token was kept")
	}
	c.entries[other] = cachedToken{p: p, expires: time.Now().Add(-time.Second)}
	if _, err := c.verify(llm.Keyring{key}, other); !errors.Is(err, llm.ErrInvalidToken) {
		t.Fatalf("expired entry served: %v", err)
	}

	// The cache stays bounded.
	for i := range maxCachedTokens {
		c.entries["t"+strconv.Itoa(i)] = cachedToken{p: p, expires: time.Now().Add(time.Hour)}
	}
	if _, err := c.verify(llm.Keyring{key}, token); err != nil {
		t.Fatal(err)
	}
	delete(c.entries, token)
	if _, err := c.verify(llm.Keyring{key}, token); err != nil || len(c.entries) > maxCachedTokens {
		t.Fatalf("%d entries (%v), want at most %d", len(c.entries), err, maxCachedTokens)
	}
}
