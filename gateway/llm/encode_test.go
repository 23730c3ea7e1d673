package llm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/internal/jsontest"
)

// refBlock is ContentBlock with the MarshalJSON it had before the jsonv2
// encoder (encoding/json on anonymous structs): the reference whose values
// the encoder must write (jsontest.Same; the bytes may differ: escapes, number
// forms).
type refBlock ContentBlock

type refContent []refBlock

func toRef(c Content) refContent {
	if c == nil {
		return nil
	}
	out := make(refContent, len(c))
	for i, b := range c {
		out[i] = refBlock(b)
	}
	return out
}

func (b refBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case BlockText:
		return json.Marshal(struct {
			Type         string        `json:"type"`
			Text         string        `json:"text"`
			CacheControl *CacheControl `json:"cache_control,omitempty"`
		}{b.Type, b.Text, b.CacheControl})
	case BlockToolUse:
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		return json.Marshal(struct {
			Type         string          `json:"type"`
			ID           string          `json:"id"`
			Name         string          `json:"name"`
			Input        json.RawMessage `json:"input"`
			CacheControl *CacheControl   `json:"cache_control,omitempty"`
		}{b.Type, b.ID, b.Name, input, b.CacheControl})
	}
	return json.Marshal(struct {
		Type         string          `json:"type"`
		Text         string          `json:"text,omitempty"`
		ID           string          `json:"id,omitempty"`
		Name         string          `json:"name,omitempty"`
		Input        json.RawMessage `json:"input,omitempty"`
		ToolUseID    string          `json:"tool_use_id,omitempty"`
		Content      refContent      `json:"content,omitempty"`
		IsError      bool            `json:"is_error,omitempty"`
		Thinking     string          `json:"thinking,omitempty"`
		Signature    string          `json:"signature,omitempty"`
		CacheControl *CacheControl   `json:"cache_control,omitempty"`
	}{b.Type, b.Text, b.ID, b.Name, b.Input, b.ToolUseID, toRef(b.Content), b.IsError, b.Thinking, b.Signature, b.CacheControl})
}

type refMessage struct {
	Role    string     `json:"role"`
	Content refContent `json:"content"`
}

// refEncode is encoding/json's encoding of r, with the old block encoding.
func refEncode(r MessageRequest) ([]byte, error) {
	var msgs []refMessage
	if r.Messages != nil {
		msgs = make([]refMessage, len(r.Messages))
		for i, m := range r.Messages {
			msgs[i] = refMessage{m.Role, toRef(m.Content)}
		}
	}
	return json.Marshal(struct {
		Model         string          `json:"model"`
		MaxTokens     int             `json:"max_tokens"`
		System        refContent      `json:"system,omitempty"`
		Messages      []refMessage    `json:"messages"`
		Tools         []Tool          `json:"tools,omitempty"`
		ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
		Stream        bool            `json:"stream,omitempty"`
		StopSequences []string        `json:"stop_sequences,omitempty"`
		Temperature   *float64        `json:"temperature,omitempty"`
		TopP          *float64        `json:"top_p,omitempty"`
		TopK          *int            `json:"top_k,omitempty"`
		Metadata      *Metadata       `json:"metadata,omitempty"`
		Thinking      json.RawMessage `json:"thinking,omitempty"`
	}{r.Model, r.MaxTokens, toRef(r.System), msgs, r.Tools, r.ToolChoice, r.Stream, r.StopSequences,
		r.Temperature, r.TopP, r.TopK, r.Metadata, r.Thinking})
}

// tricky holds every character encoding/json escapes.
const tricky = "quote \" backslash \\ <b>&amp; \b\f\n\r\t \x00\x01\x1f \u2028\u2029 é日本 \xff\xfe bad \xe2\x82"

func testRequests() map[string]MessageRequest {
	temp, topP, topK := 0.7, 1e-7, 40
	return map[string]MessageRequest{
		"minimal": {Model: "m", MaxTokens: 1},
		"nil and empty": {Model: "", Messages: []Message{{Role: RoleUser}, {Role: RoleUser, Content: Content{}}},
			System: Content{}, Tools: []Tool{}},
		"everything": {
			Model: "claude-" + tricky, MaxTokens: 4096, Stream: true,
			System: Content{{Type: BlockText, Text: tricky, CacheControl: &CacheControl{Type: "ephemeral", TTL: "1h"}}},
			Messages: []Message{
				{Role: RoleUser, Content: Content{{Type: BlockText, Text: ""}, {Type: BlockText, Text: tricky}}},
				{Role: RoleAssistant, Content: Content{
					{Type: BlockThinking, Thinking: tricky, Signature: "sig"},
					{Type: BlockToolUse, ID: "tu_1", Name: "list_items"},
					{Type: BlockToolUse, ID: "tu_2", Name: "get_item", Input: json.RawMessage(" {\"key\" : \"<ABC-1> & \\u2028\", \"n\": [1, 2.5e3, true, null]}\n")},
					{Type: BlockToolUse, ID: "tu_3", Name: "x", Input: json.RawMessage(`{}`), CacheControl: &CacheControl{Type: "ephemeral"}},
					{Type: BlockToolUse, ID: "tu_4", Name: "y", Input: json.RawMessage("{\"s\": \"\u2028\u2029 \xe2\x80\"}")},
				}},
				{Role: RoleUser, Content: Content{
					{Type: BlockToolResult, ToolUseID: "tu_1", Content: Content{{Type: BlockText, Text: tricky}}, IsError: true},
					{Type: BlockToolResult, ToolUseID: "tu_2", Content: Content{{Type: BlockText, Text: "ok", CacheControl: &CacheControl{Type: "ephemeral"}}}},
					{Type: "redacted_thinking", Text: "t", ID: "i", Name: "n", Input: json.RawMessage(`[ 1 ]`)},
				}},
			},
			Tools: []Tool{
				{Name: "a", Description: tricky, InputSchema: json.RawMessage("{\n  \"type\": \"object\",\n  \"description\": \"<&>\"\n}")},
				{Name: "b"},
				{Name: "c", InputSchema: json.RawMessage(`{"type":"object"}`), CacheControl: &CacheControl{Type: "ephemeral"}},
			},
			ToolChoice:    &ToolChoice{Type: "tool", Name: "a", DisableParallelToolUse: true},
			StopSequences: []string{"\n\nHuman:", tricky},
			Temperature:   &temp, TopP: &topP, TopK: &topK,
			Metadata: &Metadata{UserID: "u<1>"},
			Thinking: json.RawMessage(` {"type": "enabled", "budget_tokens": 1024} `),
		},
	}
}

func TestEncodeRequestMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for name, req := range testRequests() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := refEncode(req)
			if err != nil {
				t.Fatal(err)
			}
			c := &Client{}
			for range 3 { // the second and third take the tools from the cache
				got, err := c.encodeRequest(&req)
				if err != nil {
					t.Fatal(err)
				}
				jsontest.Same(t, got, want)
			}
			// json.Marshal of the request (ContentBlock.MarshalJSON) agrees too.
			got, err := json.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			jsontest.Same(t, got, want)
		})
	}
}

// FuzzEncodeRequest checks the encoder against encoding/json on a request
// with the fuzzed text everywhere a string goes and the fuzzed raw JSON
// everywhere raw JSON goes: the same value, or an error on both sides.
func FuzzEncodeRequest(f *testing.F) {
	for _, s := range []string{"", "plain", tricky, "\u2028", "\xed\xa0\x80", "a\x7fb"} {
		f.Add(s, []byte(`{}`))
	}
	for _, raw := range []string{` { "a" : [1, 2.5e3, -0, 1E+2, "<&>", null, true] } `, `"\u2028"`, `{"a":`, `nope`, `[1,]`,
		"\"\u2028 \u2029 \u2027 \xe2\x80\"", "[\"\xe2\x80\xa8\"]", `{"a":1,"a":2}`, ` `, `1 2`} {
		f.Add("s", []byte(raw))
	}
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		req := MessageRequest{Model: s, MaxTokens: 1, System: Content{{Type: BlockText, Text: s}},
			Messages: []Message{{Role: s, Content: Content{
				{Type: BlockToolUse, ID: s, Name: s, Input: raw},
				{Type: BlockToolResult, ToolUseID: s, Content: Content{{Type: s, Text: s, Input: raw}}},
			}}},
			Tools:    []Tool{{Name: s, Description: s, InputSchema: raw, CacheControl: &CacheControl{Type: s, TTL: s}}},
			Thinking: raw,
		}
		want, werr := refEncode(req)
		got, gerr := (&Client{}).encodeRequest(&req)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%q, %q: error %v, encoding/json's %v", s, raw, gerr, werr)
		}
		if werr == nil {
			jsontest.Same(t, got, want)
		}
	})
}

func TestEncodeRequestRefusesInvalidJSON(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		req  MessageRequest
		want string // where the error says it is
	}{
		"tool input": {MessageRequest{Messages: []Message{{Role: RoleAssistant, Content: Content{{Type: BlockToolUse, Input: json.RawMessage(`{"a":`)}}}}},
			`within "/messages/0/content/0/input/a"`},
		"result input": {MessageRequest{Messages: []Message{{}, {Role: RoleUser, Content: Content{{Type: BlockToolResult,
			Content: Content{{}, {Type: "x", Input: json.RawMessage(`nope`)}}}}}}}, `within "/messages/1/content/0/content/1/input"`},
		"system":       {MessageRequest{System: Content{{Type: "x", Input: json.RawMessage(`1 2`)}}}, `within "/system/0/input"`},
		"input schema": {MessageRequest{Tools: []Tool{{Name: "a", InputSchema: json.RawMessage(`{nope}`)}}}, `within "/0/input_schema"`},
		"thinking":     {MessageRequest{Thinking: json.RawMessage(`[`)}, `within "/thinking"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := (&Client{}).encodeRequest(&tt.req)
			if err == nil {
				t.Fatal("encoded invalid JSON")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "llm: encode ") {
				t.Fatalf("error %q does not say %s", err, tt.want)
			}
		})
	}
}

func TestToolsCacheFollowsTheTools(t *testing.T) {
	t.Parallel()
	var c toolsCache
	schema := []byte(`{"type":"object"}`)
	tools := []Tool{{Name: "a", InputSchema: schema}}
	first, err := c.encode(tools)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.encode([]Tool{{Name: "a", InputSchema: []byte(`{"type":"object"}`)}}); &again[0] != &first[0] {
		t.Error("equal tools were encoded again")
	}
	marked := []Tool{{Name: "a", InputSchema: []byte(`{"type":"object"}`), CacheControl: &CacheControl{Type: "ephemeral"}}}
	withMark, _ := c.encode(marked)
	if again, _ := c.encode(tools); &again[0] != &first[0] {
		t.Error("the tools without the breakpoint were encoded again")
	}
	if again, _ := c.encode(marked); &again[0] != &withMark[0] {
		t.Error("the tools with the breakpoint were encoded again")
	}
	copy(schema, `{"type":"string"}`) // the caller reuses its bytes
	changes := map[string][]Tool{
		"schema":        tools,
		"name":          {{Name: "b", InputSchema: []byte(`{"type":"object"}`)}},
		"description":   {{Name: "a", Description: "d", InputSchema: []byte(`{"type":"object"}`)}},
		"cache control": {{Name: "a", InputSchema: []byte(`{"type":"object"}`), CacheControl: &CacheControl{Type: "ephemeral"}}},
		"nil schema":    {{Name: "a"}},
		"one more":      {{Name: "a", InputSchema: []byte(`{"type":"object"}`)}, {Name: "b", InputSchema: []byte(`{}`)}},
	}
	for name, ts := range changes {
		got, err := c.encode(ts)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(ts)
		t.Log(name)
		jsontest.Same(t, got, want)
	}
}
