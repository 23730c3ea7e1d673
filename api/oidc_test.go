package api_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/store"
)

// fakeIssuer is an OpenID Connect issuer in the test process: discovery
// document and JWKS over HTTP, one RSA signing key.
type fakeIssuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newFakeIssuer(t *testing.T) *fakeIssuer {
	t.Helper()
	f := &fakeIssuer{key: newRSAKey(t)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		issuerJSON(w, map[string]any{
			"issuer":                                f.srv.URL,
			"jwks_uri":                              f.srv.URL + "/keys",
			"authorization_endpoint":                f.srv.URL + "/authorize",
			"token_endpoint":                        f.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		issuerJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &f.key.PublicKey, KeyID: "k1", Algorithm: string(jose.RS256), Use: "sig"},
		}})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func newRSAKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func issuerJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// token signs claims with key as key id "k1"; the standard claims default
// to a valid token for subject alice.
func (f *fakeIssuer) token(t *testing.T, key *rsa.PrivateKey, override map[string]any) string {
	t.Helper()
	now := time.Now()
	claims := map[string]any{"iss": f.srv.URL, "aud": "ballet", "sub": "alice",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "email": "alice@example.com", "name": "Alice"}
	for k, v := range override {
		claims[k] = v
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestOIDCTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iss := newFakeIssuer(t)
	e := newAuthEnv(t, api.AuthConfig{Mode: api.AuthToken, OIDC: api.OIDCConfig{IssuerURL: iss.srv.URL, Audience: "ballet"}}, nil)
	alice := "oidc:" + iss.srv.URL + "#alice"
	if _, err := e.db.CreateRoleBinding(ctx, alice, store.RoleViewer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.org.ID}, store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	// A local subject named like an OIDC sub: the OIDC user is not it.
	if _, err := e.db.CreateRoleBinding(ctx, "root", store.RolePlatformAdmin,
		store.Scope{Kind: store.ScopePlatform}, store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.db.CreateAPIToken(ctx, "root", "ops", 0); err != nil {
		t.Fatal(err)
	}
	apiToken, _, err := e.db.CreateAPIToken(ctx, "carol", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	e.tokens = map[string]string{
		"valid":           iss.token(t, iss.key, nil),
		"newcomer":        iss.token(t, iss.key, map[string]any{"sub": "newcomer", "email": "new@example.com"}),
		"wrong audience":  iss.token(t, iss.key, map[string]any{"aud": "someone-else"}),
		"expired":         iss.token(t, iss.key, map[string]any{"iat": time.Now().Add(-2 * time.Hour).Unix(), "exp": time.Now().Add(-time.Hour).Unix()}),
		"wrong signature": iss.token(t, newRSAKey(t), nil),
		"wrong issuer":    iss.token(t, iss.key, map[string]any{"iss": "https://evil.example.com"}),
		"no subject":      iss.token(t, iss.key, map[string]any{"sub": ""}),
		"sub root":        iss.token(t, iss.key, map[string]any{"sub": "root"}),
		"NUL in sub":      iss.token(t, iss.key, map[string]any{"sub": "ro\u0000ot"}),
		"over-long sub":   iss.token(t, iss.key, map[string]any{"sub": strings.Repeat("s", 250)}),
		"NUL in name":     iss.token(t, iss.key, map[string]any{"sub": "dave", "name": "Da\u0000ve"}),
		"not a jwt":       "hello",
		"api token":       apiToken,
	}
	tests := []struct {
		who     string
		path    string
		status  int
		message string
	}{
		{"valid", "/api/v1/organizations/acme", 200, ""},
		{"newcomer", "/api/v1/organizations", 200, ""},
		{"api token", "/api/v1/tokens", 200, ""},
		{"wrong audience", "/api/v1/organizations/acme", 401, "audience"},
		{"expired", "/api/v1/organizations/acme", 401, "expired"},
		{"wrong signature", "/api/v1/organizations/acme", 401, "signature"},
		{"wrong issuer", "/api/v1/organizations/acme", 401, "different provider"},
		{"no subject", "/api/v1/organizations/acme", 401, "sub"},
		{"sub root", "/api/v1/organizations/acme", 404, ""},
		{"NUL in sub", "/api/v1/organizations/acme", 401, "sub: must not contain NUL"},
		{"over-long sub", "/api/v1/organizations/acme", 401, "sub: at most"},
		{"NUL in name", "/api/v1/organizations", 200, ""},
		{"not a jwt", "/api/v1/organizations/acme", 401, "invalid token"},
	}
	for _, tt := range tests {
		t.Run(tt.who, func(t *testing.T) {
			r := e.do("GET", tt.path, tt.who, nil).expect(t, tt.status)
			if tt.status == 401 && (r.errorCode() != "unauthenticated" || !strings.Contains(r.message(), tt.message)) {
				t.Fatalf("error %q %q, want unauthenticated naming %q", r.errorCode(), r.message(), tt.message)
			}
		})
	}
	// The OIDC root is no platform admin: it cannot create organizations,
	// and it got a subject of its own, named by the issuer.
	e.do("POST", "/api/v1/organizations", "sub root", map[string]any{"key": "rooted", "name": "Rooted"}).expect(t, http.StatusForbidden)
	if r := e.do("GET", "/api/v1/tokens", "sub root", nil).expect(t, http.StatusOK); len(r.Body["items"].([]any)) != 0 {
		t.Fatalf("OIDC root sees the local root's tokens: %s", r.Raw)
	}
	// The newcomer got a subjects row on first sight, and sees no organization.
	var kind, email string
	if err := e.db.Pool().QueryRow(ctx, `SELECT kind, email FROM subjects WHERE id = $1`,
		"oidc:"+iss.srv.URL+"#newcomer").Scan(&kind, &email); err != nil {
		t.Fatal(err)
	}
	if kind != store.ActorHuman || email != "new@example.com" {
		t.Fatalf("newcomer row: kind %q email %q", kind, email)
	}
	if r := e.do("GET", "/api/v1/organizations", "newcomer", nil); len(r.Body["items"].([]any)) != 0 {
		t.Fatalf("newcomer sees %s", r.Raw)
	}
	// Alice acts as herself: a token she creates is hers.
	r := e.do("POST", "/api/v1/tokens", "valid", map[string]any{"name": "cli", "ttl": "720h"}).expect(t, 201)
	var owner string
	var expires time.Time
	if err := e.db.Pool().QueryRow(ctx, `SELECT subject, expires_at FROM api_tokens WHERE id = $1`, r.Body["id"]).Scan(&owner, &expires); err != nil || owner != alice {
		t.Fatalf("token owner %q, %v", owner, err)
	}
	// It ends with the JWT she signed in with (an hour), not 30 days on.
	if expires.After(time.Now().Add(time.Hour + time.Minute)) {
		t.Fatalf("a token minted with a JWT that expires within the hour expires at %s", expires)
	}
}

func TestOIDCIssuerDownAtStart(t *testing.T) {
	t.Parallel()
	iss := newFakeIssuer(t)
	token := iss.token(t, iss.key, nil)
	iss.srv.Close() // the issuer is gone before the api starts
	var logs logtest.Buffer
	e := newAuthEnv(t, api.AuthConfig{Mode: api.AuthToken, OIDC: api.OIDCConfig{IssuerURL: iss.srv.URL, Audience: "ballet"}},
		slog.New(slog.NewTextHandler(&logs, nil)))
	e.do("GET", "/healthz", "", nil).expect(t, http.StatusOK)
	e.tokens["alice"] = token
	for range 2 { // the second is answered from the remembered failure
		r := e.do("GET", "/api/v1/organizations", "alice", nil).expect(t, http.StatusUnauthorized)
		if r.errorCode() != "unauthenticated" || !strings.Contains(r.message(), "issuer "+iss.srv.URL+" is unavailable") {
			t.Fatalf("reply %s", r.Raw)
		}
	}
	if got := strings.Count(logs.String(), "oidc discovery failed"); got != 1 {
		t.Fatalf("discovery failure logged %d times, want 1; logs:\n%s", got, logs.String())
	}
}
