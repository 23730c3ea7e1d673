package gateway

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

func toolRequest(stream bool) llm.MessageRequest {
	return llm.MessageRequest{
		Model: "gpt-test", MaxTokens: 256, Stream: stream,
		System: llm.Content{{Type: llm.BlockText, Text: "You are the planner."}},
		Tools: []llm.Tool{{Name: "search_project", Description: "Search the project.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)}},
		ToolChoice: &llm.ToolChoice{Type: "auto"},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: llm.Content{{Type: llm.BlockText, Text: "Plan password reset."}}},
			{Role: llm.RoleAssistant, Content: llm.Content{
				{Type: llm.BlockText, Text: "Looking."},
				{Type: llm.BlockToolUse, ID: "call_1", Name: "list_runnable", Input: json.RawMessage(`{}`)},
			}},
			{Role: llm.RoleUser, Content: llm.Content{
				{Type: llm.BlockToolResult, ToolUseID: "call_1", Content: llm.Content{{Type: llm.BlockText, Text: `{"items":[]}`}}},
				{Type: llm.BlockText, Text: "Go on."},
			}},
		},
	}
}

const openaiScript = `
loop: true
answers:
  - match: 'Go on'
    chunk_size: 5
    usage: {input_tokens: 120, output_tokens: 30, cache_read_input_tokens: 64}
    content:
      - text: "Nothing runnable; searching."
      - tool_use: {id: call_2, name: search_project, input: {query: password reset}}
`

func TestOpenAITranslationRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(openaiScript), withProvider(store.ProviderOpenAI))
	ctx := context.Background()
	want := llm.MessageResponse{
		Type: "message", Role: llm.RoleAssistant, Model: "gpt-test", StopReason: llm.StopToolUse,
		Content: llm.Content{
			{Type: llm.BlockText, Text: "Nothing runnable; searching."},
			{Type: llm.BlockToolUse, ID: "call_2", Name: "search_project", Input: json.RawMessage(`{"query":"password reset"}`)},
		},
		Usage: llm.Usage{InputTokens: 120, OutputTokens: 30, CacheReadInputTokens: 64},
	}
	for _, stream := range []bool{false, true} {
		var got *llm.MessageResponse
		var err error
		if stream {
			var s *llm.Stream
			if s, err = e.client.Stream(ctx, e.principal(), toolRequest(true)); err == nil {
				got, err = s.Collect(nil)
			}
		} else {
			got, err = e.client.Create(ctx, e.principal(), toolRequest(false))
		}
		if err != nil {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		got.ID = ""
		if !reflect.DeepEqual(*got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Fatalf("stream=%v:\n got %s\nwant %s", stream, g, w)
		}
	}

	// What the upstream was sent.
	reqs := e.fake.Requests()
	if len(reqs) != 2 || reqs[1].Path != "/v1/chat/completions" || reqs[1].Header.Get("Authorization") != "Bearer sk-test-openai" {
		t.Fatalf("requests = %+v", reqs)
	}
	var sent struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		Options   struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		ToolChoice string `json:"tool_choice"`
		Tools      []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		Messages []struct {
			Role       string  `json:"role"`
			Content    *string `json:"content"`
			ToolCallID string  `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Model != "gpt-test" || sent.MaxTokens != 256 || !sent.Stream || !sent.Options.IncludeUsage || sent.ToolChoice != "auto" {
		t.Fatalf("sent = %s", reqs[1].Body)
	}
	if len(sent.Tools) != 1 || sent.Tools[0].Type != "function" || sent.Tools[0].Function.Name != "search_project" ||
		!strings.Contains(string(sent.Tools[0].Function.Parameters), `"required":["query"]`) {
		t.Fatalf("tools = %+v", sent.Tools)
	}
	var roles []string
	for _, m := range sent.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,user" {
		t.Fatalf("roles = %v", roles)
	}
	a, tool := sent.Messages[2], sent.Messages[3]
	if *a.Content != "Looking." || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_1" || a.ToolCalls[0].Function.Arguments != "{}" {
		t.Fatalf("assistant = %+v", a)
	}
	if tool.ToolCallID != "call_1" || *tool.Content != `{"items":[]}` || *sent.Messages[0].Content != "You are the planner." {
		t.Fatalf("tool = %+v", tool)
	}
	rows := e.usageRows(t, 2)
	for _, r := range rows {
		if r.Provider != "openai" || r.InputTokens != 120 || r.OutputTokens != 30 || r.CacheReadTokens != 64 || r.Estimated {
			t.Fatalf("usage = %+v", rows)
		}
	}
}

func TestOpenAIStopReasonsAndErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer string
		stop   string
		err    string
	}{
		{"end turn", `content: [{text: "done"}]`, llm.StopEndTurn, ""},
		{"max tokens", "content: [{text: cut}]\n    stop_reason: max_tokens", llm.StopMaxTokens, ""},
		{"tool use", `content: [{tool_use: {name: list_runnable}}]`, llm.StopToolUse, ""},
		{"error chunk", "content: [{text: partial answer}]\n    fault: {kind: error_event, status: 500, after: 2}", "", llm.ErrAPI},
		{"upstream 400", "content: [{text: x}]\n    fault: {kind: status, status: 400, message: bad model}", "", llm.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse("loop: true\nanswers:\n  - "+tt.answer+"\n    usage: {input_tokens: 3, output_tokens: 2}\n"),
				withProvider(store.ProviderOpenAI))
			s, err := e.client.Stream(context.Background(), e.principal(), hello(true))
			var msg *llm.MessageResponse
			if err == nil {
				msg, err = s.Collect(nil)
			}
			if tt.err != "" {
				ae, ok := err.(*llm.APIError)
				if !ok || ae.Type != tt.err {
					t.Fatalf("err = %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil || msg.StopReason != tt.stop {
				t.Fatalf("msg = %+v, err = %v", msg, err)
			}
		})
	}
}

func TestToOpenAIToolChoice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		choice llm.ToolChoice
		want   string
	}{
		{llm.ToolChoice{Type: "auto"}, `"auto"`},
		{llm.ToolChoice{Type: "any"}, `"required"`},
		{llm.ToolChoice{Type: "none"}, `"none"`},
		{llm.ToolChoice{Type: "tool", Name: "read_skill", DisableParallelToolUse: true}, `{"function":{"name":"read_skill"},"type":"function"}`},
	}
	for _, tt := range tests {
		r := toolRequest(false)
		r.ToolChoice = &tt.choice
		or, err := toOpenAI(&r)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(or.ToolChoice)
		if string(got) != tt.want {
			t.Errorf("%+v → %s, want %s", tt.choice, got, tt.want)
		}
		if tt.choice.DisableParallelToolUse && (or.ParallelToolCalls == nil || *or.ParallelToolCalls) {
			t.Errorf("parallel_tool_calls not false")
		}
	}
	r := toolRequest(false)
	r.Messages[0].Content = llm.Content{{Type: "image"}}
	if _, err := toOpenAI(&r); err == nil || !strings.Contains(err.Error(), "messages.0") {
		t.Fatalf("image block: %v", err)
	}
}
