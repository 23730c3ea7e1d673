package worker

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/llm"
)

func TestMarkCacheBreakpoints(t *testing.T) {
	t.Parallel()
	text := func(s string) llm.ContentBlock { return llm.ContentBlock{Type: llm.BlockText, Text: s} }
	marked := func(b llm.ContentBlock) llm.ContentBlock { b.CacheControl = ephemeral(); return b }
	use := llm.ContentBlock{Type: llm.BlockToolUse, ID: "t1", Name: "lookup", Input: json.RawMessage(`{}`)}
	result := llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: "t1", Content: llm.Content{text("ok")}}
	thinking := llm.ContentBlock{Type: llm.BlockThinking, Thinking: "hm", Signature: "sig"}
	tools := []llm.Tool{{Name: "a", InputSchema: json.RawMessage(`{}`)}, {Name: "b", InputSchema: json.RawMessage(`{}`)}}
	sys := llm.Content{text("you plan"), text("project WEB")}
	msgs := func(m ...llm.Message) []llm.Message { return m }
	user := func(c ...llm.ContentBlock) llm.Message { return llm.Message{Role: llm.RoleUser, Content: c} }
	asst := func(c ...llm.ContentBlock) llm.Message { return llm.Message{Role: llm.RoleAssistant, Content: c} }
	tests := []struct {
		name string
		req  llm.MessageRequest
		want string // where the markers are
	}{
		{"first call", llm.MessageRequest{Tools: tools, System: sys, Messages: msgs(user(text("plan")))},
			"tool:b system:1 message:0.0"},
		{"a tool round: the ask is marked too", llm.MessageRequest{Tools: tools, System: sys,
			Messages: msgs(user(text("plan")), asst(text("looking"), use), user(result))},
			"tool:b system:1 message:0.0 message:2.0"},
		{"the last markable block: no thinking, no empty text", llm.MessageRequest{Tools: tools, System: sys,
			Messages: msgs(user(text("plan"), text(" ")), asst(thinking, use, thinking), user(result, text("")))},
			"tool:b system:1 message:0.0 message:2.0"},
		{"an assistant prefill is the last message", llm.MessageRequest{System: sys,
			Messages: msgs(user(text("plan")), asst(use), user(result), asst(text("So")))},
			"system:1 message:2.0 message:3.0"},
		{"no tools, no system", llm.MessageRequest{Messages: msgs(user(text("plan")))}, "message:0.0"},
		{"markers already there count: never more than four", llm.MessageRequest{Tools: tools, System: sys,
			Messages: msgs(user(marked(text("a"))), asst(marked(text("b"))), user(marked(text("c"))), asst(use), user(result))},
			"message:0.0 message:1.0 message:2.0 message:4.0"},
		{"four already: nothing added", llm.MessageRequest{Tools: tools, System: sys,
			Messages: msgs(user(marked(text("a"))), asst(marked(text("b"))), user(marked(text("c"))), asst(marked(use)), user(result))},
			"message:0.0 message:1.0 message:2.0 message:3.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before, _ := json.Marshal(tt.req)
			req := tt.req
			markCacheBreakpoints(&req)
			if after, _ := json.Marshal(tt.req); string(after) != string(before) {
				t.Fatalf("the caller's request changed:\n%s\n%s", before, after)
			}
			if got := where(req); got != tt.want {
				t.Fatalf("markers at %q, want %q", got, tt.want)
			}
			if n := countBreakpoints(&req); n > maxBreakpoints {
				t.Fatalf("%d markers", n)
			}
			b, _ := json.Marshal(req)
			if got := strings.Count(string(b), `"cache_control":{"type":"ephemeral"}`); got != countBreakpoints(&req) {
				t.Fatalf("%d markers in JSON, want %d: %s", got, countBreakpoints(&req), b)
			}
		})
	}
}

// where lists the marked blocks as tool:<name>, system:<i>, message:<i>.<j>.
func where(req llm.MessageRequest) string {
	var out []string
	for _, t := range req.Tools {
		if t.CacheControl != nil {
			out = append(out, "tool:"+t.Name)
		}
	}
	for i, b := range req.System {
		if b.CacheControl != nil {
			out = append(out, "system:"+strconv.Itoa(i))
		}
	}
	for i, m := range req.Messages {
		for j, b := range m.Content {
			if b.CacheControl != nil {
				out = append(out, "message:"+strconv.Itoa(i)+"."+strconv.Itoa(j))
			}
		}
	}
	return strings.Join(out, " ")
}
