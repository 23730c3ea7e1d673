package worker

import (
	"strings"

	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/store"
)

// interruptedResult answers a tool call that never got its result.
// A tool that writes stores its result with its effect, so a call without a
// result had no effect.
const interruptedResult = "error: this tool call was interrupted before it completed and had no effect; call it again if it is still needed"

// toModel converts stored messages to the Messages API form.
func toModel(msgs []store.Message) []gateway.Message {
	out := make([]gateway.Message, 0, len(msgs))
	for _, m := range msgs {
		gm := gateway.Message{Role: m.Role}
		for _, b := range m.Content {
			switch b.Type {
			case store.BlockText:
				gm.Content = append(gm.Content, gateway.ContentBlock{Type: gateway.BlockText, Text: b.Text})
			case store.BlockToolUse:
				gm.Content = append(gm.Content, gateway.ContentBlock{Type: gateway.BlockToolUse, ID: b.ToolUseID, Name: b.Name, Input: b.Input})
			case store.BlockToolResult:
				gm.Content = append(gm.Content, gateway.ContentBlock{Type: gateway.BlockToolResult, ToolUseID: b.ToolUseID,
					Content: gateway.Content{{Type: gateway.BlockText, Text: b.Text}}, IsError: b.IsError})
			}
		}
		out = append(out, gm)
	}
	return out
}

// fromModel converts a model answer's content to stored blocks.
func fromModel(c gateway.Content) []store.Block {
	out := []store.Block{} // an empty answer is stored as [], never NULL
	for _, b := range c {
		switch b.Type {
		case gateway.BlockText:
			if b.Text != "" {
				out = append(out, store.Block{Type: store.BlockText, Text: b.Text})
			}
		case gateway.BlockToolUse:
			input := b.Input
			if len(input) == 0 {
				input = []byte(`{}`)
			}
			out = append(out, store.Block{Type: store.BlockToolUse, ToolUseID: b.ID, Name: b.Name, Input: input})
		}
	}
	return out
}

// repair makes a history the Messages API accepts (SPEC §7): empty messages
// drop, neighbours of the same role merge, it starts with a user message,
// every tool call is answered (an unanswered one gets an error result saying
// it was interrupted), results without their call drop, and results come
// first in their message.
func repair(msgs []gateway.Message) []gateway.Message {
	var merged []gateway.Message
	for _, m := range msgs {
		var blocks gateway.Content
		for _, b := range m.Content {
			if b.Type == gateway.BlockText && strings.TrimSpace(b.Text) == "" {
				continue
			}
			blocks = append(blocks, b)
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(merged); n > 0 && merged[n-1].Role == m.Role {
			merged[n-1].Content = append(merged[n-1].Content, blocks...)
			continue
		}
		merged = append(merged, gateway.Message{Role: m.Role, Content: blocks})
	}
	if len(merged) > 0 && merged[0].Role != gateway.RoleUser {
		merged = append([]gateway.Message{{Role: gateway.RoleUser, Content: gateway.Content{
			{Type: gateway.BlockText, Text: "(earlier conversation omitted)"}}}}, merged...)
	}
	var out []gateway.Message
	for i := 0; i < len(merged); i++ {
		m := merged[i]
		if m.Role == gateway.RoleUser {
			var calls []string
			if len(out) > 0 {
				calls = toolCalls(out[len(out)-1])
			}
			m.Content = answer(m.Content, calls)
			if len(m.Content) == 0 {
				continue
			}
			out = append(out, m)
			continue
		}
		out = append(out, m)
		if calls := toolCalls(m); len(calls) > 0 && (i+1 == len(merged) || merged[i+1].Role != gateway.RoleUser) {
			// No user message follows: answer the calls in one of our own.
			out = append(out, gateway.Message{Role: gateway.RoleUser, Content: answer(nil, calls)})
		}
	}
	return out
}

// toolCalls are the tool_use ids of an assistant message, in order.
func toolCalls(m gateway.Message) []string {
	if m.Role != gateway.RoleAssistant {
		return nil
	}
	var calls []string
	for _, b := range m.Content {
		if b.Type == gateway.BlockToolUse {
			calls = append(calls, b.ID)
		}
	}
	return calls
}

// answer puts a result for every call first, in the order of the calls in
// content, and drops results that answer no call.
func answer(content gateway.Content, calls []string) gateway.Content {
	given := map[string]gateway.ContentBlock{}
	var rest gateway.Content
	for _, b := range content {
		if b.Type != gateway.BlockToolResult {
			rest = append(rest, b)
		} else if _, dup := given[b.ToolUseID]; !dup {
			given[b.ToolUseID] = b
		}
	}
	results := make(gateway.Content, 0, len(calls)+len(rest))
	for _, id := range calls {
		b, ok := given[id]
		if !ok {
			b = gateway.ContentBlock{Type: gateway.BlockToolResult, ToolUseID: id, IsError: true,
				Content: gateway.Content{{Type: gateway.BlockText, Text: interruptedResult}}}
		}
		results = append(results, b)
	}
	return append(results, rest...)
}
