package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
)

// unknownToken is a well-formed API token that no one holds, the same for
// the same seed.
func unknownToken(seed string) string {
	h := sha256.Sum256([]byte(seed))
	return store.TokenPrefix + base64.RawURLEncoding.EncodeToString(h[:])
}

// expectLimited fails t unless r is the 429 of the failed-authentication
// limit, with a Retry-After of 1-60 seconds and a message holding want.
func expectLimited(t *testing.T, r response, retry, want string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.errorCode() != "resource_exhausted" ||
		!strings.Contains(r.message(), "auth.failure_burst") || !strings.Contains(r.message(), want) {
		t.Fatalf("%d %s, want 429 resource_exhausted naming auth.failure_burst and %q", r.Status, r.Raw, want)
	}
	if secs, err := strconv.Atoi(retry); err != nil || secs < 1 || secs > 60 {
		t.Fatalf("Retry-After %q, want 1-60 seconds", retry)
	}
}

// TestAuthFailuresAreLimitedPerAddress: a burst of bad tokens from one
// address ends in 429 with Retry-After; yet every valid token, even one
// never used before, still gets in from there, other addresses are not
// affected, and the bad tokens wrote nothing.
func TestAuthFailuresAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	const burst = 5
	e := newLimitEnv(t, api.AuthConfig{Mode: api.AuthToken, FailureBurst: burst, FailuresPerMinute: 1}, nil)
	good, unseen := e.token(t, "ann"), e.token(t, "ann")
	const attacker, other = "127.0.0.2", "127.0.0.1"
	if r, _ := e.get(t, call{from: attacker, token: good}); r.Status != http.StatusOK {
		t.Fatalf("good token before the burst: %d %s", r.Status, r.Raw)
	}
	subjectsBefore := e.countRows(t, "subjects")
	for i := range burst { // a new token each: the limit met is the address's
		if r, _ := e.get(t, call{from: attacker, token: unknownToken(fmt.Sprint("burst", i))}); r.Status != http.StatusUnauthorized {
			t.Fatalf("bad token %d: %d %s, want 401", i, r.Status, r.Raw)
		}
	}
	for i := range 20 {
		bad := []string{unknownToken(fmt.Sprint("past", i)), "not-a-token", good + "x"}[i%3]
		r, retry := e.get(t, call{from: attacker, token: bad})
		expectLimited(t, r, retry, "from "+attacker)
	}
	tests := []struct {
		name   string
		from   string
		token  string
		status int
	}{
		{"a valid token from the limited address", attacker, good, http.StatusOK},
		{"a never-used valid token from the limited address", attacker, unseen, http.StatusOK},
		{"a valid token from another address", other, good, http.StatusOK},
		{"a bad token from another address", other, unknownToken("other"), http.StatusUnauthorized},
		{"a bad token from the limited address", attacker, unknownToken("late"), http.StatusTooManyRequests},
		{"a malformed token from the limited address", attacker, store.TokenPrefix + "BBBB", http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if r, _ := e.get(t, call{from: tt.from, token: tt.token}); r.Status != tt.status {
				t.Fatalf("status %d %s, want %d", r.Status, r.Raw, tt.status)
			}
		})
	}
	t.Cleanup(func() {
		// The bad tokens added no subject (store tests check that a bad
		// token writes nothing at all).
		if got := e.countRows(t, "subjects"); got != subjectsBefore {
			t.Errorf("subjects %d, want %d", got, subjectsBefore)
		}
	})
}

// TestAValidTokenIsNeverRefused: behind an ingress every user shares one
// address; whatever bad tokens came from it, a valid token never used in
// this process gets in at once, over REST and over /rpc.
func TestAValidTokenIsNeverRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const burst = 3
	e := newLimitEnv(t, api.AuthConfig{Mode: api.AuthToken, FailureBurst: burst, FailuresPerMinute: 1}, nil)
	revoked, tok, err := e.db.CreateAPIToken(ctx, "gone", "old", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.RevokeAPIToken(ctx, "gone", tok.ID); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		from string
		bad  func(i int) string
	}{
		{"after unknown tokens", "127.0.0.21", func(i int) string { return unknownToken(fmt.Sprint("unknown", i)) }},
		{"after malformed tokens", "127.0.0.22", func(i int) string { return store.TokenPrefix + strconv.Itoa(i) }},
		{"after one unknown token again and again", "127.0.0.23", func(int) string { return unknownToken("again") }},
		{"after a revoked token again and again", "127.0.0.24", func(int) string { return revoked }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var last response
			for i := range 4 * burst {
				last, _ = e.get(t, call{from: tt.from, token: tt.bad(i)})
			}
			if last.Status != http.StatusTooManyRequests {
				t.Fatalf("the last bad token: %d %s, want 429", last.Status, last.Raw)
			}
			if r, _ := e.get(t, call{from: tt.from, token: e.token(t, "ann")}); r.Status != http.StatusOK {
				t.Fatalf("a new valid token over REST: %d %s, want 200", r.Status, r.Raw)
			}
			m := e.rpcAuth(t, tt.from, "", e.token(t, "bob"))
			if code, msg := rpcErr(m); code != 0 {
				t.Fatalf("a new valid token over /rpc: %d %s", code, msg)
			}
		})
	}
}

// TestMalformedTokensCostNoLookUp: a token that cannot be an API token nor
// a JWT is 401 without a database query or a request to the OIDC issuer.
func TestMalformedTokensCostNoLookUp(t *testing.T) {
	t.Parallel()
	var issuerHits atomic.Int64
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		issuerHits.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(issuer.Close)
	e := newLimitEnv(t, api.AuthConfig{Mode: api.AuthToken, FailureBurst: 1000, FailuresPerMinute: 60,
		OIDC: api.OIDCConfig{IssuerURL: issuer.URL, Audience: "ballet"}}, nil)
	b64 := base64.RawURLEncoding.EncodeToString
	alg, claims := b64([]byte(`{"alg":"RS256","kid":"k1"}`)), b64([]byte(`{"sub":"alice"}`))
	tests := []struct {
		name  string
		token string
	}{
		{"API token too short", store.TokenPrefix + "BBBB"},
		{"API token a character too long", unknownToken("x") + "x"},
		{"API token not base64url", unknownToken("y")[:46] + "*"},
		{"API token not canonical", store.TokenPrefix + strings.Repeat("A", 42) + "B"},
		{"the prefix alone", store.TokenPrefix},
		{"no dots", "hello"},
		{"two parts", alg + "." + claims},
		{"four parts", alg + "." + claims + ".c2ln.c2ln"},
		{"parts not base64url", "a.b.c"},
		{"header without alg", b64([]byte(`{"typ":"JWT"}`)) + "." + claims + ".c2ln"},
		{"claims not an object", alg + "." + b64([]byte(`["alice"]`)) + ".c2ln"},
		{"no signature", alg + "." + claims + "."},
	}
	t.Run("malformed", func(t *testing.T) {
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				id := fmt.Sprint("malformed-", i)
				r, _ := e.get(t, call{token: tt.token, id: id})
				if n := e.queries.of(id); n != 0 {
					t.Fatalf("%d database queries, want none", n)
				}
				if r.Status != http.StatusUnauthorized || r.errorCode() != "unauthenticated" || !strings.Contains(r.message(), "invalid token: malformed") {
					t.Fatalf("%d %s, want 401 unauthenticated naming a malformed token", r.Status, r.Raw)
				}
			})
		}
	})
	if n := issuerHits.Load(); n != 0 {
		t.Fatalf("the issuer was asked %d times, want never", n)
	}
	// The counts are real: a well-formed token is looked up.
	r, _ := e.get(t, call{token: unknownToken("well-formed"), id: "well-formed-api"})
	if r.Status != http.StatusUnauthorized || e.queries.of("well-formed-api") == 0 {
		t.Fatalf("well-formed API token: %d %s after %d queries, want 401 after a look-up", r.Status, r.Raw, e.queries.of("well-formed-api"))
	}
	r, _ = e.get(t, call{token: alg + "." + claims + ".c2ln", id: "well-formed-jwt"})
	if r.Status != http.StatusUnauthorized || issuerHits.Load() == 0 {
		t.Fatalf("well-formed JWT: %d %s, the issuer asked %d times; want 401 after asking it", r.Status, r.Raw, issuerHits.Load())
	}
}

// TestRepeatedFailuresOfOneToken: a token that failed auth.failure_burst
// times is refused with 429 and Retry-After from any address, without a
// look-up; the new address itself is not limited.
func TestRepeatedFailuresOfOneToken(t *testing.T) {
	t.Parallel()
	const burst = 3
	e := newLimitEnv(t, api.AuthConfig{Mode: api.AuthToken, FailureBurst: burst, FailuresPerMinute: 1}, nil)
	tests := []struct {
		name string
		net  int // the addresses are 127.0.<net>.<n>
		rpc  bool
	}{
		{"REST", 1, false},
		{"rpc auth", 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := func(n int) string { return fmt.Sprintf("127.0.%d.%d", tt.net, n+1) }
			bad := unknownToken(tt.name)
			for i := range burst { // each from an address of its own
				if r, _ := e.get(t, call{from: addr(i), token: bad}); r.Status != http.StatusUnauthorized {
					t.Fatalf("failure %d: %d %s, want 401", i, r.Status, r.Raw)
				}
			}
			fresh := addr(burst)
			if tt.rpc {
				m := e.rpcAuth(t, fresh, "", bad)
				expectErr(t, m, api.RPCInternal, "auth.failure_burst")
				if d := rpcErrData(m); d["code"] != "resource_exhausted" || num(d["retry_after"]) < 1 || num(d["retry_after"]) > 60 {
					t.Fatalf("data %v, want resource_exhausted with retry_after 1-60", d)
				}
			} else {
				r, retry := e.get(t, call{from: fresh, token: bad, id: "again-" + tt.name})
				expectLimited(t, r, retry, "this token failed to authenticate too often")
				if n := e.queries.of("again-" + tt.name); n != 0 {
					t.Fatalf("%d database queries, want none", n)
				}
			}
			if r, _ := e.get(t, call{from: fresh, token: unknownToken(tt.name + " other")}); r.Status != http.StatusUnauthorized {
				t.Fatalf("another bad token from the new address: %d %s, want 401", r.Status, r.Raw)
			}
			if r, _ := e.get(t, call{from: fresh, token: e.token(t, "ann")}); r.Status != http.StatusOK {
				t.Fatalf("a valid token from the new address: %d %s, want 200", r.Status, r.Raw)
			}
		})
	}
}
