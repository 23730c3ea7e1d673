package gateway

import (
	"errors"
	"reflect"
	"strconv"
	"sync"
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
	clock := time.Now()
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); clock = clock.Add(d) }
	c := newTokenCache(now)
	for i := range 2 {
		got, err := c.verify(llm.Keyring{key}, token)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("verify %d = %+v, %v; want %+v", i, got, err, want)
		}
		got.Capabilities[0] = "changed" // a caller's copy, not the cache's
	}
	if n := c.c.Len(); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}

	// A failure is not kept.
	other, err := llm.Mint([]byte(randomHex(32)), p, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.verify(llm.Keyring{key}, other); !errors.Is(err, llm.ErrInvalidToken) {
		t.Fatalf("foreign token: %v", err)
	}
	if n := c.c.Len(); n != 1 {
		t.Fatalf("a refused token was kept: %d entries", n)
	}

	// An entry serves until the token's expiry, and no longer: a kept
	// token past it is verified again.
	c.c.Set(other, p, now().Add(50*time.Second))
	advance(49 * time.Second)
	if got, err := c.verify(llm.Keyring{key}, other); err != nil || got.Subject != p.Subject {
		t.Fatalf("kept entry before its expiry: %+v, %v", got, err)
	}
	if _, ok := c.c.Get(token); !ok {
		t.Fatal("token dropped before its expiry, in about a minute")
	}
	advance(2 * time.Second)
	if _, err := c.verify(llm.Keyring{key}, other); !errors.Is(err, llm.ErrInvalidToken) {
		t.Fatalf("expired entry served: %v", err)
	}
	advance(10 * time.Second)
	if _, ok := c.c.Get(token); ok {
		t.Fatal("token kept past its expiry")
	}

	// The cache stays bounded.
	fresh := newTokenCache(nil)
	for i := range maxCachedTokens {
		fresh.c.Set("t"+strconv.Itoa(i), p, time.Now().Add(time.Hour))
	}
	if _, err := fresh.verify(llm.Keyring{key}, token); err != nil || fresh.c.Len() > maxCachedTokens {
		t.Fatalf("%d entries (%v), want at most %d", fresh.c.Len(), err, maxCachedTokens)
	}
}
