package worker

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

func text(s string) llm.ContentBlock { return llm.ContentBlock{Type: llm.BlockText, Text: s} }

func TestRepairOfStoredHistory(t *testing.T) {
	t.Parallel()
	use := func(id string) store.Block {
		return store.Block{Type: store.BlockToolUse, ToolUseID: id, Name: "n", Input: json.RawMessage(`{}`)}
	}
	result := func(id string) store.Block { return store.Block{Type: store.BlockToolResult, ToolUseID: id, Text: "r"} }
	modelUse := func(id string) llm.ContentBlock {
		return llm.ContentBlock{Type: llm.BlockToolUse, ID: id, Name: "n", Input: json.RawMessage(`{}`)}
	}
	modelResult := func(id string, s string, isErr bool) llm.ContentBlock {
		return llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: id, Content: llm.Content{text(s)}, IsError: isErr}
	}
	tests := map[string]struct {
		stored []store.Message
		want   []llm.Message
	}{
		"plain": {
			stored: []store.Message{{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "a"}}},
				{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "b"}}}},
			want: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{text("a")}},
				{Role: llm.RoleAssistant, Content: llm.Content{text("b")}}},
		},
		// Merging the first two must not write over the third's blocks,
		// which share toModel's array.
		"same roles merge": {
			stored: []store.Message{{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "a"}}},
				{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "b"}}},
				{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "c"}}},
				{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "d"}}}},
			want: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{text("a"), text("b")}},
				{Role: llm.RoleAssistant, Content: llm.Content{text("c")}},
				{Role: llm.RoleUser, Content: llm.Content{text("d")}}},
		},
		"blank text drops": {
			stored: []store.Message{{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "a"},
				{Type: store.BlockText, Text: "  "}, {Type: store.BlockText, Text: "b"}}},
				{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: " "}}},
				{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "c"}}}},
			want: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{text("a"), text("b")}},
				{Role: llm.RoleAssistant, Content: llm.Content{text("c")}}},
		},
		"unanswered call": {
			stored: []store.Message{{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "a"}}},
				{Role: "assistant", Content: []store.Block{use("t1")}},
				{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "go on"}}}},
			want: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{text("a")}},
				{Role: llm.RoleAssistant, Content: llm.Content{modelUse("t1")}},
				{Role: llm.RoleUser, Content: llm.Content{modelResult("t1", interruptedResult, true), text("go on")}}},
		},
		"answered call, stray result": {
			stored: []store.Message{{Role: "user", Content: []store.Block{{Type: store.BlockText, Text: "a"}, result("x")}},
				{Role: "assistant", Content: []store.Block{use("t1")}},
				{Role: "user", Content: []store.Block{result("t1")}}},
			want: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{text("a")}},
				{Role: llm.RoleAssistant, Content: llm.Content{modelUse("t1")}},
				{Role: llm.RoleUser, Content: llm.Content{modelResult("t1", "r", false)}}},
		},
		"starts with the model": {
			stored: []store.Message{{Role: "assistant", Content: []store.Block{{Type: store.BlockText, Text: "b"}}}},
			want: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{text("(earlier conversation omitted)")}},
				{Role: llm.RoleAssistant, Content: llm.Content{text("b")}}},
		},
		"empty": {},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := repair(toModel(tt.stored))
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("repaired\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}
