package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// mintTicket mints a stream ticket for the env's session as who.
func (e *sseEnv) mintTicket(t *testing.T, who string) (ticket, url string) {
	t.Helper()
	r := e.do("POST", "/api/v1/planner/sessions/"+e.session+"/stream-tickets", who, nil).expect(t, 201)
	ticket, _ = r.Body["ticket"].(string)
	url, _ = r.Body["url"].(string)
	if !strings.HasPrefix(ticket, "bst_") || r.Body["expires_at"] == nil {
		t.Fatalf("mint: %s", r.Raw)
	}
	return ticket, url
}

// A stream ticket opens one event stream without an Authorization header
// (as an EventSource must): it follows a turn, as the subject who minted
// it, and is used up by that one connection.
func TestStreamTicketOpensOneStream(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, sseScript)
	ticket, url := e.mintTicket(t, "viewer")
	if want := "/api/v1/planner/sessions/" + e.session + "/outputs?ticket=" + ticket; url != want {
		t.Fatalf("url %q, want %q", url, want)
	}
	if strings.Contains(url, e.tokens["viewer"]) {
		t.Fatal("the ticket URL holds the API token")
	}
	// Redis holds neither the ticket nor the token in the clear.
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, e.ns+"ballet:stream-ticket:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("ticket keys %v: %v", keys, err)
	}
	raw, err := e.rdb.Get(ctx, keys[0]).Result()
	if err != nil || strings.Contains(raw+keys[0], e.tokens["viewer"]) || strings.Contains(raw+keys[0], ticket) {
		t.Fatalf("the ticket's record shows the token or the ticket (%v)", err)
	}
	if ttl, err := e.rdb.TTL(ctx, keys[0]).Result(); err != nil || ttl <= 0 || ttl > 60e9 {
		t.Fatalf("ticket TTL %v: %v", ttl, err)
	}
	live := e.stream(t, "", "?ticket="+ticket)
	e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer", map[string]any{"text": "What is next?"}).expect(t, 202)
	evs := live.until(t, isDone)
	if types := strings.Join(stored(t, evs, 1), ","); types != "queued,started,message,tool_call,tool_result,message,message,done" {
		t.Fatalf("stored outputs %s", types)
	}
	// Used: a second connection with it (an EventSource's reconnect) is 401.
	res := e.streamRequest(t, "", "?ticket="+ticket)
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != 401 || !strings.Contains(string(body), "stream ticket unknown, used or expired") {
		t.Fatalf("a used ticket: %d %s", res.StatusCode, body)
	}
}

func TestStreamTicketRefusals(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, "")
	other := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "other"}).expect(t, 201).Body["id"].(string)
	mint := func(who, session string) response {
		return e.do("POST", "/api/v1/planner/sessions/"+session+"/stream-tickets", who, nil)
	}
	for _, tt := range []struct {
		name, who, session string
		status             int
		msg                string
	}{
		{"no token", "", e.session, 401, "bearer"},
		{"other organization", "outsider", e.session, 404, "not found"},
		{"unknown session", "engineer", "00000000-0000-0000-0000-000000000000", 404, "not found"},
	} {
		t.Run("mint "+tt.name, func(t *testing.T) {
			r := mint(tt.who, tt.session).expect(t, tt.status)
			if !strings.Contains(r.message(), tt.msg) {
				t.Fatalf("message %q does not contain %q", r.message(), tt.msg)
			}
		})
	}
	r := e.do("POST", "/api/v1/planner/sessions/"+e.session+"/stream-tickets", "viewer", `{"session":"x"}`).expect(t, 400)
	if !strings.Contains(r.message(), `unknown field "session"`) {
		t.Fatalf("mint with a body: %q", r.message())
	}

	forOther := mint("viewer", other).expect(t, 201).Body["ticket"].(string)
	revoked := func() string {
		tok, info, err := e.db.CreateAPIToken(context.Background(), "viewer@example.com", "short", 0)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens["revoked"] = tok
		r := mint("revoked", e.session).expect(t, 201)
		if err := e.db.RevokeAPIToken(context.Background(), "viewer@example.com", info.ID); err != nil {
			t.Fatal(err)
		}
		return r.Body["ticket"].(string)
	}()
	fresh := func() string { return mint("viewer", e.session).expect(t, 201).Body["ticket"].(string) }
	for _, tt := range []struct {
		name, query string
		header      []string
		status      int
		msg         string
	}{
		{"unknown ticket", "?ticket=bst_" + strings.Repeat("A", 52), nil, 401, "stream ticket unknown, used or expired"},
		{"not a ticket", "?ticket=" + e.tokens["viewer"], nil, 401, "stream ticket unknown, used or expired"},
		{"another session's ticket", "?ticket=" + forOther, nil, 403, "the stream ticket is for session " + other},
		{"a revoked token's ticket", "?ticket=" + revoked, nil, 401, "token"},
		{"not an event stream", "?ticket=" + fresh(), []string{"Accept", "application/json"}, 400, "opens only the event stream"},
		{"ticket and header", "?ticket=" + fresh(), []string{"Authorization", "Bearer " + e.tokens["viewer"]}, 400, "either a stream ticket or an Authorization header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := e.streamRequest(t, "", tt.query, tt.header...)
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if res.StatusCode != tt.status || !strings.Contains(string(body), tt.msg) {
				t.Fatalf("%d %s, want %d containing %q", res.StatusCode, body, tt.status, tt.msg)
			}
		})
	}
	// Without a ticket the route still wants a token.
	res := e.streamRequest(t, "", "")
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no ticket, no token: %d", res.StatusCode)
	}
}
