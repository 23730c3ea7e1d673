package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker"
)

// threeRounds is a turn of three tool rounds; its answers leave usage to
// the fake, which reports cache reads and writes.
const threeRounds = `
answers:
  - match: 'tool_result lookup.*three'
    content: [{text: "Done: see WEB-1."}]
  - match: 'tool_result lookup.*two'
    content: [{tool_use: {name: lookup, input: {q: three}}}]
  - match: 'tool_result lookup.*one'
    content: [{tool_use: {name: lookup, input: {q: two}}}]
  - match: '^plan'
    content: [{text: "Let me look."}, {tool_use: {name: lookup, input: {q: one}}}]
`

// longAsk is a human message long enough (over 1,024 tokens with the
// system prompt) for the first call's prefix to be cached.
var longAsk = "plan the login rework. " + strings.Repeat("The team ships a web app with a login page and an API. ", 80)

func withoutPromptCaching(_ *worker.Config, pc *worker.PlannerConfig) { pc.PromptCaching = false }

// modelCalls decodes the Messages API requests the fake received.
func modelCalls(t *testing.T, e *env) []llm.MessageRequest {
	t.Helper()
	var out []llm.MessageRequest
	for _, r := range e.fake.Requests() {
		if r.Path != "/v1/messages" {
			continue
		}
		var req llm.MessageRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			t.Fatalf("request %s: %v", r.Body, err)
		}
		out = append(out, req)
	}
	return out
}

// breakpoints names the blocks of req that carry a cache_control marker:
// tool:<name>, system:<i>, message:<i>.<j>.
func breakpoints(t *testing.T, req llm.MessageRequest) []string {
	t.Helper()
	var out []string
	check := func(where string, cc *llm.CacheControl) {
		if cc == nil {
			return
		}
		if cc.Type != "ephemeral" {
			t.Errorf("%s: cache_control %+v, want ephemeral", where, cc)
		}
		out = append(out, where)
	}
	for _, tl := range req.Tools {
		check("tool:"+tl.Name, tl.CacheControl)
	}
	for i, b := range req.System {
		check(fmt.Sprintf("system:%d", i), b.CacheControl)
	}
	for i, m := range req.Messages {
		for j, b := range m.Content {
			check(fmt.Sprintf("message:%d.%d", i, j), b.CacheControl)
		}
	}
	return out
}

// wantBreakpoints is where the planner puts them: the last tool, the last
// system block, the last block of the last message and of the user message
// before it.
func wantBreakpoints(req llm.MessageRequest) []string {
	want := []string{"tool:" + req.Tools[len(req.Tools)-1].Name, fmt.Sprintf("system:%d", len(req.System)-1)}
	last := len(req.Messages) - 1
	for i := last - 2; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleUser {
			want = append(want, fmt.Sprintf("message:%d.%d", i, len(req.Messages[i].Content)-1))
			break
		}
	}
	return append(want, fmt.Sprintf("message:%d.%d", last, len(req.Messages[last].Content)-1))
}

// answerUsages is the usage stored with each assistant message of a session.
func answerUsages(t *testing.T, e *env, session string) []store.MessageUsage {
	t.Helper()
	sess, err := e.db.GetSession(context.Background(), e.human, session)
	must(t, err)
	var out []store.MessageUsage
	for _, m := range sess.Messages {
		if m.Role == "assistant" {
			out = append(out, m.Usage)
		}
	}
	return out
}

func TestPlannerCallsMarkCacheBreakpoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []envOption
		caching bool
	}{
		{"prompt caching on (the default)", nil, true},
		{"planner.prompt_caching off", []envOption{withoutPromptCaching}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, threeRounds)
			e.start(tt.opts...)
			s := e.session()
			for range 2 { // two turns: the second continues the first's cache
				res := e.send(s, longAsk)
				e.waitDone(s, res.Turn)
			}
			calls := modelCalls(t, e)
			if len(calls) != 8 {
				t.Fatalf("%d model calls, want 8", len(calls))
			}
			for i, req := range calls {
				got := breakpoints(t, req)
				if len(got) > 4 {
					t.Errorf("call %d: %d breakpoints, more than Anthropic's 4: %v", i, len(got), got)
				}
				want := []string(nil)
				if tt.caching {
					want = wantBreakpoints(req)
				}
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("call %d: breakpoints %v, want %v", i, got, want)
				}
			}
			usages := answerUsages(t, e, s)
			if len(usages) != 8 {
				t.Fatalf("%d answers stored, want 8", len(usages))
			}
			for i, u := range usages {
				switch {
				case !tt.caching && (u.CacheReadTokens != 0 || u.CacheWriteTokens != 0):
					t.Errorf("answer %d: usage %+v, want no cache use without breakpoints", i, u)
				case tt.caching && i == 0 && (u.CacheReadTokens != 0 || u.CacheWriteTokens == 0):
					t.Errorf("answer 0: usage %+v, want a cache write only", u)
				case tt.caching && i > 0:
					// Every later call reads all that the call before it cached.
					prev := usages[i-1]
					if u.CacheReadTokens != prev.CacheReadTokens+prev.CacheWriteTokens || u.CacheWriteTokens == 0 {
						t.Errorf("answer %d: usage %+v, want a read of %d (answer %d: %+v) and a write",
							i, u, prev.CacheReadTokens+prev.CacheWriteTokens, i-1, prev)
					}
				}
			}
		})
	}
}

// wideRound calls lookup twelve times at once: the round adds 24 blocks,
// more than Anthropic looks back from a breakpoint.
var wideRound = func() string {
	var calls []string
	for i := range 12 {
		calls = append(calls, fmt.Sprintf("{tool_use: {name: lookup, input: {q: q%d}}}", i))
	}
	return `
answers:
  - match: 'tool_result lookup'
    content: [{text: "Twelve lookups done."}]
  - match: '^plan'
    content: [` + strings.Join(calls, ", ") + `]
`
}()

func TestCacheHitSurvivesAWideToolRound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, wideRound)
	e.start()
	s := e.session()
	res := e.send(s, longAsk)
	e.waitDone(s, res.Turn)
	calls := modelCalls(t, e)
	if len(calls) != 2 || len(calls[1].Messages) != 3 || len(calls[1].Messages[2].Content) != 12 {
		t.Fatalf("calls %d, want the ask, then 12 results after 12 calls", len(calls))
	}
	// The second call marks the ask, where the first one's prefix ends.
	if got := breakpoints(t, calls[1]); !strings.Contains(strings.Join(got, " "), "message:0.0") {
		t.Fatalf("breakpoints %v: the ask is not marked", got)
	}
	u := answerUsages(t, e, s)
	if len(u) != 2 || u[0].CacheWriteTokens == 0 || u[1].CacheReadTokens != u[0].CacheWriteTokens {
		t.Fatalf("usages %+v: want the second call to read the first one's write", u)
	}
}

// viaGateway sends e's model calls through a gateway on e's database whose
// fallback upstream is e's fake, and returns the gateway.
func viaGateway(t *testing.T, e *env) *gateway.Server {
	t.Helper()
	cfg := gateway.DefaultConfig()
	cfg.SigningKey = "0123456789abcdef0123456789abcdef"
	cfg.RedisPrefix = e.names.Namespace + "gateway:"
	cfg.UsageFlushInterval = 20 * time.Millisecond
	cfg.FakeModels = append(cfg.FakeModels, "fake-model") // the model the env's planner calls
	gw, err := gateway.New(cfg, e.db, e.deps.Redis, prometheus.NewRegistry(), e.log, gateway.WithFallback(e.fake))
	must(t, err)
	must(t, gw.Start(context.Background()))
	t.Cleanup(gw.Stop)
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(hs.Close)
	e.deps.Model = worker.GatewayModel{Client: llm.NewClient(hs.URL, []byte(cfg.SigningKey), nil)}
	return gw
}

func TestCacheUsageIsMeteredPerProject(t *testing.T) {
	t.Parallel()
	e := newEnv(t, threeRounds)
	gw := viaGateway(t, e)
	e.start()
	ctx := context.Background()
	// A second project of the organization, with a session of its own.
	sys := store.SystemActor()
	api, err := e.db.CreateProject(ctx, e.project.OrganizationID, "API", "Api", sys)
	must(t, err)
	_, err = e.db.CreateRoleBinding(ctx, "ann@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: api.OrganizationID, ProjectID: api.ID}, sys)
	must(t, err)
	ann, err := e.db.Principal(ctx, "ann@example.com")
	must(t, err)
	e.human = store.HumanCaller(ann) // with the new binding
	web := e.session()
	other, err := e.db.CreateSession(ctx, e.human, "API", "plan")
	must(t, err)
	for _, s := range []string{web, other.ID} {
		res := e.send(s, longAsk)
		e.waitDone(s, res.Turn)
	}
	since := time.Now().Add(-time.Hour)
	for _, p := range []struct {
		project store.Project
		session string
	}{{e.project, web}, {api, other.ID}} {
		// What the planner stored is what the gateway metered.
		var want store.UsageTotal
		for _, u := range answerUsages(t, e, p.session) {
			want.Requests++
			want.InputTokens += u.InputTokens
			want.OutputTokens += u.OutputTokens
			want.CacheReadTokens += u.CacheReadTokens
			want.CacheWriteTokens += u.CacheWriteTokens
			want.Unpriced++ // fake-model has no price
		}
		want.Key = "planner:" + p.session
		if want.Requests != 4 || want.CacheReadTokens == 0 || want.CacheWriteTokens == 0 {
			t.Fatalf("project %s: stored usage %+v, want 4 answers with cache reads and writes", p.project.Key, want)
		}
		var got []store.UsageTotal
		storetest.WaitFor(t, "project "+p.project.Key+"'s usage rows", func() bool {
			must(t, gw.Flush(ctx))
			got, err = e.db.UsageReport(ctx, p.project.ID, store.UsageBySession, since)
			must(t, err)
			return len(got) == 1 && got[0].Requests == want.Requests
		})
		if got[0] != want {
			t.Errorf("project %s: usage report %+v, want %+v", p.project.Key, got[0], want)
		}
	}
}
