package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/balletplanner/ballet/api"
)

// TestForwardedForOnlyFromTrustedProxies: X-Forwarded-For names the client
// (for the access log and the failed-authentication limit) only when the
// peer is in server.trusted_proxies, and then the nearest address that is
// not a trusted proxy, never one the client wrote before it.
func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	const burst = 2
	e := newLimitEnv(t, api.AuthConfig{Mode: api.AuthToken, FailureBurst: burst, FailuresPerMinute: 1},
		func(c *api.Config) { c.TrustedProxies = []string{"127.0.0.2/31", "10.0.0.0/8"} })
	tests := []struct {
		name string
		from string // the peer; 127.0.0.2 and .3 are trusted
		xff  string
		rpc  bool
		want string // the client address
	}{
		{"an untrusted peer's X-Forwarded-For is ignored", "127.0.0.1", "203.0.113.1", false, "127.0.0.1"},
		{"a trusted peer's is used", "127.0.0.2", "203.0.113.2", false, "203.0.113.2"},
		{"what the client wrote before the proxy's entry is not", "127.0.0.2", "198.51.100.9, 203.0.113.3", false, "203.0.113.3"},
		{"trusted hops are skipped", "127.0.0.2", "203.0.113.4, 10.1.2.3", false, "203.0.113.4"},
		{"an IPv6 client", "127.0.0.2", "2001:db8::5", false, "2001:db8::5"},
		{"over /rpc", "127.0.0.3", "203.0.113.6", true, "203.0.113.6"},
		{"an untrusted peer over /rpc", "127.0.0.4", "203.0.113.7", true, "127.0.0.4"},
		{"a trusted peer without the header is the client", "127.0.0.3", "", false, "127.0.0.3"},
		{"the proxy's own header line counts, not the client's", "127.0.0.2", "198.51.100.8\n203.0.113.8", false, "203.0.113.8"},
		{"an entry with a port", "127.0.0.2", "198.51.100.9, [2001:db8:1::9]:4711", false, "2001:db8:1::9"},
		{"an entry that is no address ends at the proxy that wrote it", "127.0.0.2", "203.0.113.10, unknown", false, "127.0.0.2"},
		{"all trusted: the farthest", "127.0.0.2", "10.9.9.9, 10.1.1.1", false, "10.9.9.9"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := fmt.Sprint("xff-", i)
			if !tt.rpc {
				r, _ := e.get(t, call{from: tt.from, xff: tt.xff, token: "not-a-token", id: id})
				if r.Status != http.StatusUnauthorized {
					t.Fatalf("first failure: %d %s, want 401", r.Status, r.Raw)
				}
				lines := e.logs.Find(t, "request", map[string]string{"request_id": id})
				if len(lines) != 1 || lines[0]["remote"] != tt.want {
					t.Fatalf("access log %v, want one line with remote %s", lines, tt.want)
				}
			}
			// The limit keys on the same address: its failures end in a 429 naming it.
			for range burst {
				if tt.rpc {
					m := e.rpcAuth(t, tt.from, tt.xff, "not-a-token")
					if code, _ := rpcErr(m); code == 0 {
						t.Fatalf("a bad token authenticated: %v", m)
					}
					continue
				}
				e.get(t, call{from: tt.from, xff: tt.xff, token: "not-a-token"})
			}
			if tt.rpc {
				expectErr(t, e.rpcAuth(t, tt.from, tt.xff, "not-a-token"), api.RPCInternal, "too many failed authentications from "+tt.want+" ")
				return
			}
			r, retry := e.get(t, call{from: tt.from, xff: tt.xff, token: "not-a-token"})
			expectLimited(t, r, retry, "too many failed authentications from "+tt.want+" ")
		})
	}
}
