package worker

import (
	"slices"
	"strings"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// interruptedResult answers a tool call that never got its result.
// A tool that writes stores its result with its effect, so a call without a
// result had no effect.
const interruptedResult = "error: this tool call was interrupted before it completed and had no effect; call it again if it is still needed"

// toModel converts stored messages to the Messages API form. The blocks of
// all messages share one array, each message's capped to its own (an
// append to one, as repair's merge does, copies it).
func toModel(msgs []store.Message) []llm.Message {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	blocks := make(llm.Content, 0, n)
	out := make([]llm.Message, 0, len(msgs))
	for _, m := range msgs {
		start := len(blocks)
		for _, b := range m.Content {
			switch b.Type {
			case store.BlockText:
				blocks = append(blocks, llm.ContentBlock{Type: llm.BlockText, Text: b.Text})
			case store.BlockToolUse:
				blocks = append(blocks, llm.ContentBlock{Type: llm.BlockToolUse, ID: b.ToolUseID, Name: b.Name, Input: b.Input})
			case store.BlockToolResult:
				blocks = append(blocks, llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: b.ToolUseID,
					Content: llm.Content{{Type: llm.BlockText, Text: b.Text}}, IsError: b.IsError})
			}
		}
		gm := llm.Message{Role: m.Role}
		if len(blocks) > start {
			gm.Content = blocks[start:len(blocks):len(blocks)]
		}
		out = append(out, gm)
	}
	return out
}

// fromModel converts a model answer's content to stored blocks.
func fromModel(c llm.Content) []store.Block {
	out := []store.Block{} // an empty answer is stored as [], never NULL
	for _, b := range c {
		switch b.Type {
		case llm.BlockText:
			if b.Text != "" {
				out = append(out, store.Block{Type: store.BlockText, Text: b.Text})
			}
		case llm.BlockToolUse:
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
func repair(msgs []llm.Message) []llm.Message {
	var merged []llm.Message
	for _, m := range msgs {
		blocks := nonEmpty(m.Content)
		if len(blocks) == 0 {
			continue
		}
		if n := len(merged); n > 0 && merged[n-1].Role == m.Role {
			merged[n-1].Content = append(merged[n-1].Content, blocks...)
			continue
		}
		merged = append(merged, llm.Message{Role: m.Role, Content: blocks})
	}
	if len(merged) > 0 && merged[0].Role != llm.RoleUser {
		merged = append([]llm.Message{{Role: llm.RoleUser, Content: llm.Content{
			{Type: llm.BlockText, Text: "(earlier conversation omitted)"}}}}, merged...)
	}
	var out []llm.Message
	for i := 0; i < len(merged); i++ {
		m := merged[i]
		if m.Role == llm.RoleUser {
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
		if calls := toolCalls(m); len(calls) > 0 && (i+1 == len(merged) || merged[i+1].Role != llm.RoleUser) {
			// No user message follows: answer the calls in one of our own.
			out = append(out, llm.Message{Role: llm.RoleUser, Content: answer(nil, calls)})
		}
	}
	return out
}

// nonEmpty is content without its blank text blocks: content itself when
// it has none, which is the common case.
func nonEmpty(content llm.Content) llm.Content {
	blank := func(b llm.ContentBlock) bool { return b.Type == llm.BlockText && strings.TrimSpace(b.Text) == "" }
	i := slices.IndexFunc(content, blank)
	if i < 0 {
		return content
	}
	out := make(llm.Content, i, len(content)-1)
	copy(out, content[:i])
	for _, b := range content[i+1:] {
		if !blank(b) {
			out = append(out, b)
		}
	}
	return out
}

// toolCalls are the tool_use ids of an assistant message, in order.
func toolCalls(m llm.Message) []string {
	if m.Role != llm.RoleAssistant {
		return nil
	}
	var calls []string
	for _, b := range m.Content {
		if b.Type == llm.BlockToolUse {
			calls = append(calls, b.ID)
		}
	}
	return calls
}

// answer puts a result for every call first, in the order of the calls in
// content, and drops results that answer no call.
func answer(content llm.Content, calls []string) llm.Content {
	if len(calls) == 0 && !slices.ContainsFunc(content, isResult) {
		return content // nothing to answer, nothing to drop
	}
	given := map[string]llm.ContentBlock{}
	var rest llm.Content
	for _, b := range content {
		if b.Type != llm.BlockToolResult {
			rest = append(rest, b)
		} else if _, dup := given[b.ToolUseID]; !dup {
			given[b.ToolUseID] = b
		}
	}
	results := make(llm.Content, 0, len(calls)+len(rest))
	for _, id := range calls {
		b, ok := given[id]
		if !ok {
			b = llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: id, IsError: true,
				Content: llm.Content{{Type: llm.BlockText, Text: interruptedResult}}}
		}
		results = append(results, b)
	}
	return append(results, rest...)
}

func isResult(b llm.ContentBlock) bool { return b.Type == llm.BlockToolResult }
