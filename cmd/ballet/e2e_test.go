package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// client speaks to a running api as one token holder.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (c client) do(method, path string, body any, out any) int {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		must(c.t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	must(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	must(c.t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
		}
	}
	return res.StatusCode
}

// The product path end to end: `ballet demo`, then `ballet serve` with the
// scripted demo model; a human sends a message over REST; the worker runs
// the demo conversation through the gateway with the real tools, as the
// human, and a changeset waits for the human's decision.
func TestServeRunsTheDemoConversation(t *testing.T) {
	t.Parallel()
	p, token, ns := startDemoServe(t, "demo")
	c := client{t: t, base: "http://" + p.addr + "/api/v1", token: token}

	var sess struct{ ID string }
	if s := c.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "Password reset"}, &sess); s != 201 {
		t.Fatalf("create session: %d", s)
	}
	var sent struct {
		Seq      int64
		Turn     string
		Position int64
	}
	if s := c.do("POST", "/planner/sessions/"+sess.ID+"/messages",
		map[string]any{"text": "Customers keep asking for password reset. What should we plan?"}, &sent); s != 202 || sent.Seq != 1 || sent.Position != 0 {
		t.Fatalf("send: %d %+v", s, sent)
	}
	type output struct {
		Type    string
		Tool    string
		Text    string
		IsError bool `json:"is_error"`
		Cursor  int64
	}
	var outs []output
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		var page struct{ Items []output }
		c.do("GET", "/planner/sessions/"+sess.ID+"/outputs", nil, &page)
		outs = page.Items
		n := len(outs)
		return n > 0 && outs[n-1].Type == "done"
	}) {
		t.Fatalf("no done output: %+v\n%s", outs, p.log())
	}
	var calls []string
	for _, o := range outs {
		if o.Type == "tool_call" {
			calls = append(calls, o.Tool)
		}
		if o.Type == "tool_result" && o.IsError {
			t.Errorf("tool %s failed: %s", o.Tool, o.Text)
		}
	}
	if got := strings.Join(calls, ","); got != "list_runnable,search_project,read_skill,propose_changeset" {
		t.Fatalf("tool calls %s", got)
	}
	if last := outs[len(outs)-1]; last.Text != "end_turn" {
		t.Fatalf("done %q", last.Text)
	}
	var changesets struct {
		Items []struct {
			Title      string
			Status     string
			ProposedBy struct {
				Kind      string
				Subject   string
				ActingFor string `json:"acting_for"`
			} `json:"proposed_by"`
		}
	}
	c.do("GET", "/projects/DEMO/changesets?status=proposed", nil, &changesets)
	if len(changesets.Items) != 1 || changesets.Items[0].ProposedBy.ActingFor != "demo@example.com" ||
		changesets.Items[0].ProposedBy.Subject != "planner:"+sess.ID {
		t.Fatalf("proposed changesets %+v", changesets.Items)
	}
	// Every model call was metered to the project, as the planner session.
	var usage struct {
		Items []map[string]any
	}
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		c.do("GET", "/projects/DEMO/usage?group_by=session", nil, &usage)
		return len(usage.Items) == 1 && usage.Items[0]["key"] == "planner:"+sess.ID
	}) {
		t.Fatalf("usage %+v", usage.Items)
	}
	// The turn shows in the metrics: the worker counts it just after it
	// publishes the done, and stops counting it running after that.
	wants := []string{`ballet_planner_turns_total{outcome="completed"} 1`, `ballet_planner_tool_calls_total{outcome="ok",tool="propose_changeset"} 1`,
		"ballet_planner_turn_duration_seconds_count 1", "ballet_planner_queue_wait_seconds_count 1", "ballet_planner_rounds_count 1",
		`ballet_planner_running_turns 0`, `ballet_planner_queue_depth{queue="` + ns + `planner"`, `ballet_llm_requests_total{`}
	var missing []string
	storetest.Poll(storetest.WaitTimeout, func() bool {
		metrics := p.scrape(t, "")
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				missing = append(missing, want)
			}
		}
		return len(missing) == 0
	})
	for _, want := range missing {
		t.Errorf("metrics lack %s", want)
	}
	// The queue dashboard is for roles bound at platform scope only.
	root := client{t: t, base: "http://" + p.addr, token: token}
	if s := root.do("GET", "/monitoring/", nil, nil); s != http.StatusForbidden {
		t.Fatalf("dashboard as an engineer: %d", s)
	}
	p.stop(t)
}

// startDemoServe loads the demo (`ballet demo --json`) on a database and
// Redis namespace of the test's own, then starts `ballet serve` with the
// scripted model (demo or a script file) and extra settings, and returns
// the ready process, the demo token and the Redis namespace.
func startDemoServe(t *testing.T, script string, extra ...string) (p *process, token, namespace string) {
	t.Helper()
	rc := taskstest.Config(t)
	gw := freeAddr(t)
	env := append([]string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_REDIS_URL=" + rc.URL,
		"BALLET_REDIS_NAMESPACE=" + rc.Namespace, "BALLET_GATEWAY_FAKE=" + script,
		"BALLET_GATEWAY_ADDR=" + gw, "BALLET_GATEWAY_URL=http://" + gw, "BALLET_LOG_LEVEL=warn"}, extra...)
	out, stderr, code := ballet(t, env, "demo", "--json")
	if code != 0 {
		t.Fatalf("demo: %d %s", code, stderr)
	}
	var demo struct{ Token string }
	must(t, json.Unmarshal([]byte(out), &demo))
	p = startProcess(t, env, "serve")
	p.waitReady(t)
	return p, demo.Token, rc.Namespace
}
