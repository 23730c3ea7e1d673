package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
)

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so that one test can be several client addresses.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// getAs sends GET path with a bearer token from client and returns the
// status, the Retry-After header and the body.
func getAs(t *testing.T, e *env, client *http.Client, path, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("Retry-After"), string(raw)
}

// TestAuthFailuresAreLimitedPerAddress: a burst of bad tokens from one
// address ends in 429 with Retry-After; other addresses, and a token that
// authenticated before from the limited one, still get in; and the bad
// tokens wrote nothing.
func TestAuthFailuresAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const burst = 5
	e := newAuthEnv(t, api.AuthConfig{Mode: api.AuthToken, FailureBurst: burst, FailuresPerMinute: 1}, nil)
	good, _, err := e.db.CreateAPIToken(ctx, "ann", "cli", 0)
	if err != nil {
		t.Fatal(err)
	}
	unseen, _, err := e.db.CreateAPIToken(ctx, "ann", "new", 0)
	if err != nil {
		t.Fatal(err)
	}
	attacker, other := clientFrom("127.0.0.2"), clientFrom("127.0.0.1")
	if status, _, body := getAs(t, e, attacker, "/api/v1/tokens", good); status != http.StatusOK {
		t.Fatalf("good token before the burst: %d %s", status, body)
	}
	subjectsBefore := e.countRows(t, "subjects")
	bad := []string{store.TokenPrefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "not-a-token", good + "x"}
	for i := range burst {
		status, _, body := getAs(t, e, attacker, "/api/v1/tokens", bad[i%len(bad)])
		if status != http.StatusUnauthorized {
			t.Fatalf("bad token %d: %d %s, want 401", i, status, body)
		}
	}
	for i := range 20 {
		status, retry, body := getAs(t, e, attacker, "/api/v1/tokens", bad[i%len(bad)])
		if status != http.StatusTooManyRequests || !strings.Contains(body, "auth.failure_burst") {
			t.Fatalf("bad token %d past the burst: %d %s, want 429 naming auth.failure_burst", burst+i, status, body)
		}
		if secs, err := strconv.Atoi(retry); err != nil || secs < 1 || secs > 60 {
			t.Fatalf("Retry-After %q, want 1-60 seconds", retry)
		}
	}
	tests := []struct {
		name   string
		client *http.Client
		token  string
		status int
	}{
		{"good token from another address", other, good, http.StatusOK},
		{"a never-seen token from another address", other, unseen, http.StatusOK},
		{"bad token from another address", other, bad[0], http.StatusUnauthorized},
		{"known good token from the limited address", attacker, good, http.StatusOK},
		{"unproven token from the limited address waits", attacker, store.TokenPrefix + "BBBB", http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, _, body := getAs(t, e, tt.client, "/api/v1/tokens", tt.token); status != tt.status {
				t.Fatalf("status %d %s, want %d", status, body, tt.status)
			}
		})
	}
	// The bad tokens added no subject (store tests check that a bad token
	// writes nothing at all).
	if got := e.countRows(t, "subjects"); got != subjectsBefore {
		t.Fatalf("subjects %d, want %d", got, subjectsBefore)
	}
}
