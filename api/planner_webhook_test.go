package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/internal/webhooks"
)

// webhookEnv is an rpcEnv whose server allows webhooks to
// hooks.example.com (https) and to 10.0.0.5, without private networks.
func webhookEnv(t *testing.T) *rpcEnv {
	t.Helper()
	c := webhooks.DefaultConfig()
	c.AllowedHosts = []string{"hooks.example.com", "10.0.0.5"}
	p, err := webhooks.NewPolicy(c)
	if err != nil {
		t.Fatal(err)
	}
	return newRPCEnvWith(t, nil, func(d *api.Deps) { d.Webhooks = p })
}

// webhookOf is the webhook URL stored with a turn ("" for none).
func (e *env) webhookOf(t *testing.T, turn string) string {
	t.Helper()
	var url *string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT webhook_url FROM planner_turns WHERE id = $1`, turn).Scan(&url); err != nil {
		t.Fatal(err)
	}
	if url == nil {
		return ""
	}
	return *url
}

// refusedWebhooks are webhook URLs a send is refused for, with what the
// error says.
var refusedWebhooks = []struct {
	name, url, want string
}{
	{"host not allowed", "https://evil.example.net/hook", "https://evil.example.net:443/hook is not allowed: it must match an entry of webhooks.allowed_hosts"},
	{"not a URL", "not a url", `must be an absolute https URL, got "not a url"`},
	{"empty", "", `must be an absolute https URL, got ""`},
	{"ftp scheme", "ftp://hooks.example.com/hook", "scheme must be http or https"},
	{"userinfo", "https://ann:secret@hooks.example.com/hook", "must not carry a user or password"},
	{"private IP", "https://10.0.0.5/hook", "https://10.0.0.5:443 names a private, loopback or link-local address"},
	{"http to an https host", "http://hooks.example.com/hook", "http://hooks.example.com:80/hook is not allowed"},
	{"fragment", "https://hooks.example.com/hook#x", "must not have a query or fragment"},
	{"dot segments", "https://hooks.example.com/a/../hook", "must not contain . or .."},
}

func TestSendWebhookREST(t *testing.T) {
	t.Parallel()
	e := webhookEnv(t)
	path := "/api/v1/planner/sessions/" + e.session + "/messages"
	ok := e.do("POST", path, "engineer", map[string]any{"text": "hi", "webhook": "https://hooks.example.com/ballet?k=1"}).expect(t, 202)
	if got := e.webhookOf(t, ok.Body["turn"].(string)); got != "https://hooks.example.com/ballet?k=1" {
		t.Fatalf("stored webhook %q", got)
	}
	plain := e.do("POST", path, "engineer", map[string]any{"text": "no hook"}).expect(t, 202)
	if got := e.webhookOf(t, plain.Body["turn"].(string)); got != "" {
		t.Fatalf("stored webhook %q for a send without one", got)
	}
	for _, tt := range refusedWebhooks {
		t.Run(tt.name, func(t *testing.T) {
			before := e.plannerRows(t)
			r := e.do("POST", path, "engineer", map[string]any{"text": "hi", "webhook": tt.url}).expect(t, 400)
			if r.errorCode() != "invalid_argument" || !strings.Contains(r.message(), "webhook: ") || !strings.Contains(r.message(), tt.want) {
				t.Fatalf("%s %q, want %q", r.errorCode(), r.message(), tt.want)
			}
			if after := e.plannerRows(t); after != before {
				t.Fatalf("a refused send wrote %d rows", after-before)
			}
		})
	}
}

func TestSendWebhookRPC(t *testing.T) {
	t.Parallel()
	e := webhookEnv(t)
	c := e.mustRaw(t, api.SubprotocolJSON)
	authAs(t, e, c, "engineer")
	res := c.call(t, 2, "planner.send", map[string]any{"session": e.session, "text": "hi", "webhook": "https://hooks.example.com/b"})
	if code, msg := rpcErr(res); code != 0 {
		t.Fatalf("send: %d %s", code, msg)
	}
	turn := res["result"].(map[string]any)["turn"].(string)
	if got := e.webhookOf(t, turn); got != "https://hooks.example.com/b" {
		t.Fatalf("stored webhook %q", got)
	}
	for i, tt := range refusedWebhooks {
		t.Run(tt.name, func(t *testing.T) {
			before := e.plannerRows(t)
			expectErr(t, c.call(t, 10+i, "planner.send", map[string]any{"session": e.session, "text": "hi", "webhook": tt.url}),
				api.RPCInvalidParams, tt.want)
			if after := e.plannerRows(t); after != before {
				t.Fatalf("a refused send wrote %d rows", after-before)
			}
		})
	}
}

// TestSendWebhookOff: a server without a webhook policy refuses every
// webhook, saying so, and stores nothing.
func TestSendWebhookOff(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	before := e.plannerRows(t)
	r := e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer",
		map[string]any{"text": "hi", "webhook": "https://hooks.example.com/b"}).expect(t, 400)
	if !strings.Contains(r.message(), "webhook: this server allows no webhooks (webhooks.allowed_hosts is empty)") {
		t.Fatalf("message %q", r.message())
	}
	if after := e.plannerRows(t); after != before {
		t.Fatalf("a refused send wrote %d rows", after-before)
	}
}
