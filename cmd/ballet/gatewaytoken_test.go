package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestAdminGatewayTokenVerifies(t *testing.T) {
	t.Parallel()
	const key = "a-signing-key-for-the-test-0123456789"
	env := []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_GATEWAY_SIGNING_KEY=" + key}
	if _, stderr, code := ballet(t, env, "admin", "org", "create", "--key", "acme", "--name", "Acme"); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code := ballet(t, env, "admin", "project", "create", "--org", "acme", "--key", "WEB", "--name", "Web")
	if code != 0 {
		t.Fatal(stderr)
	}
	var proj struct {
		ID             string `json:"id"`
		OrganizationID string `json:"organization_id"`
	}
	if err := json.Unmarshal([]byte(out), &proj); err != nil || proj.ID == "" {
		t.Fatalf("%q: %v", out, err)
	}

	out, stderr, code = ballet(t, env, "admin", "gateway-token", "--org", "acme", "--project", "WEB",
		"--session", "s-1", "--acting-for", "alice@example.com", "--ttl", "5m", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var res struct {
		Token        string    `json:"token"`
		Organization string    `json:"organization"`
		Project      string    `json:"project"`
		ExpiresAt    time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	p, err := llm.VerifyToken([]byte(key), res.Token)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Principal{Subject: "planner:s-1", Organization: proj.OrganizationID, Project: proj.ID,
		Session: "s-1", ActingFor: "alice@example.com", Capabilities: []string{llm.CapabilityInvoke}}
	if p.Subject != want.Subject || p.Organization != want.Organization || p.Project != want.Project ||
		p.Session != want.Session || p.ActingFor != want.ActingFor || !p.Can(llm.CapabilityInvoke) {
		t.Errorf("principal = %+v, want %+v", p, want)
	}
	if res.Organization != "acme" || res.Project != "WEB" || time.Until(res.ExpiresAt) > 5*time.Minute {
		t.Errorf("result = %+v", res)
	}
	if _, err := llm.VerifyToken([]byte("another key"), res.Token); err == nil {
		t.Error("the token verifies with another key")
	}

	// Without --json: the bare token, for $(…).
	out, stderr, code = ballet(t, env, "admin", "gateway-token", "--org", "acme")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	p, err = llm.VerifyToken([]byte(key), strings.TrimSpace(out))
	if err != nil || p.Subject != "admin" || p.Project != "" {
		t.Fatalf("bare token: %+v, %v", p, err)
	}
}

func TestAdminGatewayTokenRefusals(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"no signing key", nil, []string{"--org", "acme"}, 1, "gateway.signing_key"},
		{"no org", []string{"BALLET_GATEWAY_SIGNING_KEY=k0123456789abcdef0123456789abcdef"}, nil, 2, "--org is required"},
		{"ten years", []string{"BALLET_GATEWAY_SIGNING_KEY=k0123456789abcdef0123456789abcdef"}, []string{"--org", "acme", "--ttl", "87600h"}, 2, "--ttl must be positive and at most 24h0m0s, got 87600h0m0s"},
		{"a short key", []string{"BALLET_GATEWAY_SIGNING_KEY=abc"}, []string{"--org", "acme"}, 1, "gateway.signing_key: must be at least 32 bytes, got 3"},
		{"unknown org", []string{"BALLET_GATEWAY_SIGNING_KEY=k0123456789abcdef0123456789abcdef"}, []string{"--org", "nope"}, 1, `organization "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"BALLET_DATABASE_URL=" + url}, tc.env...)
			_, stderr, code := ballet(t, env, append([]string{"admin", "gateway-token"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestAdminGatewayTokenHelp(t *testing.T) {
	t.Parallel()
	out, _, code := ballet(t, nil, "admin", "gateway-token", "--help")
	if code != 0 || !strings.Contains(out, "Usage:\n  ballet admin gateway-token") {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
}
