package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

// benchTurns is the length of the benchmarked session.
const benchTurns = 20

// Anthropic's prices relative to base input tokens.
const (
	cacheWritePrice = 1.25
	cacheReadPrice  = 0.1
)

// BenchmarkPromptCaching plays a 20-turn planner session of the demo (each
// turn: list_runnable, search_project, read_skill, propose_changeset, then
// the summing up: five model calls) against the fake model reporting cache
// usage by Anthropic's rules, with the planner's breakpoints and without,
// and reports the session's input tokens, cache writes and reads, and the
// input it would be billed at Anthropic's prices (cache write 1.25x, cache
// read 0.1x of base input). The figures are deterministic; run it once:
//
//	go test ./worker -run '^$' -bench PromptCaching -benchtime 1x
func BenchmarkPromptCaching(b *testing.B) {
	for _, caching := range []bool{true, false} {
		b.Run(fmt.Sprintf("breakpoints=%v", caching), func(b *testing.B) {
			var u llm.Usage
			var calls int64
			for range b.N {
				u, calls = playDemoSession(b, caching)
			}
			billed := float64(u.InputTokens) + cacheWritePrice*float64(u.CacheCreationInputTokens) + cacheReadPrice*float64(u.CacheReadInputTokens)
			b.ReportMetric(float64(calls), "calls/session")
			b.ReportMetric(float64(u.InputTokens), "input_tokens/session")
			b.ReportMetric(float64(u.CacheCreationInputTokens), "cache_write/session")
			b.ReportMetric(float64(u.CacheReadInputTokens), "cache_read/session")
			b.ReportMetric(float64(u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens), "prompt_tokens/session")
			b.ReportMetric(billed, "billed_input/session")
		})
	}
}

// countingModel sums the usage of every model call it passes on.
type countingModel struct {
	inner worker.Model
	mu    sync.Mutex
	usage llm.Usage
	calls int64
}

func (m *countingModel) Call(ctx context.Context, who llm.Principal, req llm.MessageRequest, onText func(string)) (*llm.MessageResponse, error) {
	resp, err := m.inner.Call(ctx, who, req, onText)
	if err == nil {
		m.mu.Lock()
		m.calls++
		m.usage.InputTokens += resp.Usage.InputTokens
		m.usage.OutputTokens += resp.Usage.OutputTokens
		m.usage.CacheCreationInputTokens += resp.Usage.CacheCreationInputTokens
		m.usage.CacheReadInputTokens += resp.Usage.CacheReadInputTokens
		m.mu.Unlock()
	}
	return resp, err
}

// demoScript is the demo with the fake's own usage figures (the demo
// scripts fixed ones) and without its typing delays.
func demoScript() *fakellm.Script {
	s := *fakellm.Demo()
	s.Answers = slices.Clone(s.Answers)
	for i := range s.Answers {
		s.Answers[i].Usage, s.Answers[i].Latency, s.Answers[i].ChunkLatency = nil, 0, 0
	}
	return &s
}

// demoTools are the planner's tools as the model sees them, answering
// fixed results of the size the demo project gives.
func demoTools(b *testing.B) *tools.Registry {
	real, err := tools.Planner(nil)
	if err != nil {
		b.Fatal(err)
	}
	var proposals atomic.Int64
	results := map[string]func() any{
		"list_runnable": func() any {
			return map[string]any{"items": []map[string]any{
				{"key": "DEMO-4", "kind": "ticket", "title": "Sign-in with email and password", "state": "todo", "epic": "DEMO-2"},
				{"key": "DEMO-9", "kind": "ticket", "title": "Import the supplier catalogue feed", "state": "todo", "epic": "DEMO-3"},
				{"key": "DEMO-15", "kind": "ticket", "title": "Choose the payment provider", "state": "todo", "epic": "DEMO-5"},
			}}
		},
		"search_project": func() any {
			return map[string]any{"results": []map[string]any{
				{"kind": "item", "key": "DEMO-4", "title": "Sign-in with email and password", "snippet": "Email and password sign-in with a session cookie."},
				{"kind": "item", "key": "DEMO-6", "title": "Throttle failed sign-ins", "snippet": "Lock an account for 15 minutes after 5 failures."},
			}}
		},
		"read_skill": func() any {
			return map[string]any{"name": "planner", "version": 1, "body": benchSkill}
		},
		"propose_changeset": func() any {
			n := proposals.Add(1)
			return map[string]any{"id": fmt.Sprintf("cs-%04d", n), "state": "pending", "title": "Password reset by email",
				"operations": []string{"create_item reset-api: Add a password reset endpoint", "create_item reset-page: Build the reset password page",
					"add_dependency $reset-api blocks $reset-page"}}
		},
	}
	var ts []tools.Tool
	for _, d := range real.Definitions() {
		result, ok := results[d.Name]
		if !ok {
			result = func() any { return map[string]any{"items": []any{}} }
		}
		ts = append(ts, tools.Tool{Definition: d, Call: func(context.Context, tools.Env, json.RawMessage) (any, error) { return result(), nil }})
	}
	reg, err := tools.NewRegistry(nil, ts...)
	if err != nil {
		b.Fatal(err)
	}
	return reg
}

// benchSkill is a planner skill of the demo's size.
var benchSkill = strings.Repeat("- One ticket is one reviewable change; split API and UI work into two tickets, the API blocking the UI.\n", 16)

// playDemoSession plays one session on a database, Redis namespace and fake
// of its own, and returns the usage of all its model calls.
func playDemoSession(b *testing.B, caching bool) (llm.Usage, int64) {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db := storetest.New(b)
	rdb, rc := taskstest.New(b)
	names := tasks.Names{Namespace: rc.Namespace}
	queue := tasks.NewQueue(rdb, names, time.Minute)
	pub := tasks.NewPublisher(rdb, names, log)
	planner := tasks.NewPlanner(db, queue, pub, store.QueueLimits{Total: 1000, PerProject: 1000}, log)
	fake := fakellm.New(demoScript())
	if err := fake.Start(); err != nil {
		b.Fatal(err)
	}
	defer fake.Close()

	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "demo", "Demo Shop", sys)
	benchMust(b, err)
	if _, err = db.CreateProject(ctx, org.ID, "DEMO", "Demo Shop", sys); err != nil {
		b.Fatal(err)
	}
	for subject, role := range map[string]store.Role{"lead@example.com": store.RoleOrganizationAdmin, "ann@example.com": store.RoleEngineer} {
		_, err = db.CreateRoleBinding(ctx, subject, role, store.Scope{Kind: store.ScopeOrganization, OrganizationID: org.ID}, sys)
		benchMust(b, err)
	}
	caller := func(subject string) store.Caller {
		p, err := db.Principal(ctx, subject)
		benchMust(b, err)
		return store.HumanCaller(p)
	}
	lead, ann := caller("lead@example.com"), caller("ann@example.com")
	sk, err := db.CreateSkill(ctx, lead, store.NewSkill{Name: "planner", Scope: "organization:demo",
		Description: "How we plan work in Demo Shop.", Draft: benchSkill})
	benchMust(b, err)
	_, err = db.PublishSkill(ctx, lead, sk.ID)
	benchMust(b, err)

	model := &countingModel{inner: worker.GatewayModel{Client: llm.NewClient(fake.URL(), []byte("bench-key"), nil)}}
	cfg := worker.DefaultConfig()
	cfg.TaskCheckInterval = 5 * time.Millisecond
	pc := worker.DefaultPlannerConfig()
	pc.PromptCaching = caching
	w, err := worker.New(cfg, pc, 2*time.Second, worker.Deps{DB: db, Redis: rdb, Queue: queue, Publisher: pub,
		Tools: demoTools(b), Log: log, Model: model, Registry: prometheus.NewRegistry()})
	benchMust(b, err)
	benchMust(b, w.Start(ctx))
	defer w.Stop()
	session, err := db.CreateSession(ctx, ann, "DEMO", "password reset")
	benchMust(b, err)

	b.StartTimer()
	for i := range benchTurns {
		res, err := planner.Send(ctx, ann, session.ID, fmt.Sprintf("Turn %d: we need password reset by email for the shop.", i+1), "")
		benchMust(b, err)
		storetest.WaitFor(b, "turn "+res.Turn+" done", func() bool {
			outs, err := db.Outputs(ctx, session.ID, 0, 100000)
			benchMust(b, err)
			return slices.ContainsFunc(outs, func(o store.Output) bool { return o.Turn == res.Turn && o.Type == store.OutputDone })
		})
	}
	b.StopTimer()
	model.mu.Lock()
	defer model.mu.Unlock()
	return model.usage, model.calls
}

func benchMust(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
