package tasks_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// redisTrips counts a client's round trips: a command or a pipeline each,
// besides a new connection's handshake.
type redisTrips struct {
	mu                  sync.Mutex
	commands, pipelines int
}

func (c *redisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd) {
			c.mu.Lock()
			c.commands++
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *redisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, setup) {
			c.mu.Lock()
			c.pipelines++
			c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// setup reports whether cmd is part of a new connection's handshake.
func setup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// take returns the counts since the last take and starts again.
func (c *redisTrips) take() (commands, pipelines int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	commands, pipelines = c.commands, c.pipelines
	c.commands, c.pipelines = 0, 0
	return commands, pipelines
}

// TestPublishSendsAStepInOneRoundTrip: the outputs one write returns are
// published in one pipeline, in order, and move the running round as when
// sent one by one; a text delta is one command. Even with Redis's script
// cache emptied, a pipelined step arrives whole.
func TestPublishSendsAStepInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newHubEnv(t)
	rc := tasks.DefaultRedisConfig()
	rc.URL, rc.Namespace = taskstest.URL(), e.names.Namespace
	rdb, err := tasks.NewRedisClient(rc)
	must(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	trips := &redisTrips{}
	rdb.AddHook(trips)
	pub := tasks.NewPublisher(rdb, e.names, e.log)
	tr := e.startTurn(t)
	w := e.watch(t, e.hub, tr.session, 0)
	expect(t, w, "1:queued 2:started")
	step := func(what string, wantCommands, wantPipelines int, outs ...store.Output) {
		t.Helper()
		trips.take()
		pub.Publish(ctx, outs...)
		if c, p := trips.take(); c != wantCommands || p != wantPipelines {
			t.Fatalf("%s: %d commands and %d pipelines, want %d and %d", what, c, p, wantCommands, wantPipelines)
		}
	}
	text := func(s string) store.Output {
		return store.Output{Session: tr.session, Turn: tr.fence.Turn, Type: store.OutputText, Text: s}
	}
	pub.Publish(ctx, text("Hel")) // connects, and loads the script
	step("a delta", 1, 0, text("lo"))
	expect(t, w, "text(Hello)")
	answer := store.Message{Role: "assistant", StopReason: "tool_use", Content: []store.Block{
		{Type: store.BlockToolUse, ToolUseID: "toolu_1", Name: "list_items", Input: json.RawMessage(`{}`)},
		{Type: store.BlockToolUse, ToolUseID: "toolu_2", Name: "list_items", Input: json.RawMessage(`{}`)}}}
	_, outs, err := e.db.AppendMessage(ctx, tr.fence, answer,
		store.Output{Turn: tr.fence.Turn, Type: store.OutputToolCall, Tool: "list_items", ToolUseID: "toolu_1"},
		store.Output{Turn: tr.fence.Turn, Type: store.OutputToolCall, Tool: "list_items", ToolUseID: "toolu_2"})
	must(t, err)
	step("an answer with two tool calls", 0, 1, outs...)
	expect(t, w, "3:message 4:tool_call 5:tool_call")
	// The stored outputs began the next round: a joiner gets its text only.
	step("a delta", 1, 0, text("Next"))
	expect(t, w, "text(Next)")
	expect(t, e.watch(t, e.hub, tr.session, 5), "text(Next)")
	must(t, rdb.ScriptFlush(ctx).Err())
	outs, _, err = e.db.FinishTurn(ctx, tr.fence, store.TurnOutcome{Status: store.TurnFailed, Reason: store.ReasonError, Err: "boom"}, nil)
	must(t, err)
	step("the end of the turn", 0, 1, outs...)
	expect(t, w, "6:error 7:done")
	after := e.watch(t, e.hub, tr.session, 0)
	expect(t, after, "1:queued 2:started 3:message 4:tool_call 5:tool_call 6:error 7:done")
	e.settleQuiet(t, after)
}
