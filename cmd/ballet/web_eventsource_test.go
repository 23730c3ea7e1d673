package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// A page on another origin, listed in server.cors_allowed_origins, follows
// a turn with a browser's own EventSource: it mints a stream ticket over
// REST (a CORS request with the token) and opens the event stream with the
// ticket, as an EventSource sends no Authorization header.
func TestEventSourceFromAnotherOrigin(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprint(w, "<!doctype html><title>elsewhere</title>")
	}))
	t.Cleanup(other.Close)
	script := filepath.Join(t.TempDir(), "script.yaml")
	must(t, os.WriteFile(script, []byte("answers:\n  - content:\n      - text: \"Ticketed answer.\"\n"), 0o600))
	p, token, _ := startDemoServe(t, script, "BALLET_SERVER_CORS_ALLOWED_ORIGINS="+other.URL)
	api := "http://" + p.addr
	c := client{t: t, base: api + "/api/v1", token: token}
	var sess struct{ ID string }
	if s := c.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "elsewhere"}, &sess); s != 201 {
		t.Fatalf("create a session: %d", s)
	}
	pg := page{t: t, ctx: ctx, p: p}
	pg.run("open the other origin", chromedp.Navigate(other.URL))
	eval[any](pg, fmt.Sprintf(`(() => {
		window.__events = [];
		fetch(%q + "/api/v1/planner/sessions/" + %q + "/stream-tickets", {method: "POST", headers: {Authorization: "Bearer " + %q}})
			.then(r => r.json())
			.then(b => {
				const es = new EventSource(%q + b.url);
				for (const k of ["queued", "started", "message", "done"]) es.addEventListener(k, () => window.__events.push(k));
				es.onopen = () => window.__events.push("open");
				es.onerror = () => { window.__events.push("error"); es.close(); };
			})
			.catch(e => window.__events.push("failed: " + e));
		return true;
	})()`, api, sess.ID, token, api))
	pg.until("the stream opens", `window.__events.includes("open")`)
	if s := c.do("POST", "/planner/sessions/"+sess.ID+"/messages", map[string]any{"text": "hello"}, nil); s != 202 {
		t.Fatalf("send: %d", s)
	}
	pg.until("the turn's done arrives over the EventSource", `window.__events.includes("done")`)
	if got := eval[string](pg, `window.__events.join(",")`); got != "open,queued,started,message,done" {
		t.Fatalf("events %s", got)
	}
}
