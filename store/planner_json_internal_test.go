package store

import (
	"encoding/json"
	"reflect"
	"testing"
)

// contentCases are contents that must read back from their jsonb column
// as encoding/json reads them.
var contentCases = map[string][]Block{
	"nil":   nil,
	"empty": {},
	"text":  {{Type: BlockText, Text: "q\" b\\ <a>&\n\t\x01 \u2028 é"}},
	"tool use with an empty input": {{Type: BlockToolUse, ToolUseID: "toolu_1", Name: "list_runnable",
		Input: json.RawMessage(`{}`)}},
	"tool use": {{Type: BlockText, Text: "let me look"}, {Type: BlockToolUse, ToolUseID: "toolu_2", Name: "search",
		Input: json.RawMessage(` {"q": "<x>", "n": [1, 2.50, -3e2], "deep": {"a": null}} `)}},
	"error result": {{Type: BlockToolResult, ToolUseID: "toolu_2", Text: `{"error":"no"}`, IsError: true}},
	"every field":  {{Type: "x", Text: "t", ToolUseID: "u", Name: "n", Input: json.RawMessage(`[1]`), IsError: true}},
}

func TestBlocksJSONReadsAsEncodingJSON(t *testing.T) {
	t.Parallel()
	srcs := map[string][]byte{
		// As Postgres returns jsonb: keys sorted by length, a space after
		// each colon and comma, no escapes but the ones JSON requires.
		"jsonb text":          []byte(`[{"text": "hello <b>", "type": "text"}]`),
		"upper-case names":    []byte(`[{"Type": "text", "TEXT": "hi"}]`),
		"unknown member":      []byte(`[{"type": "text", "text": "hi", "citations": []}]`),
		"duplicate names":     []byte(`[{"type": "text", "type": "tool_use"}]`),
		"null":                []byte(`null`),
		"input null":          []byte(`[{"type": "tool_use", "input": null}]`),
		"escaped input":       []byte(`[{"type": "tool_use", "input": {"a": "\u003c\u0000"}}]`),
		"invalid utf-8 text":  []byte("[{\"type\": \"text\", \"text\": \"a\xffb\"}]"),
		"numbers in an input": []byte(`[{"type": "tool_use", "input": [1, 1.50, 1e400]}]`),
	}
	for name, blocks := range contentCases {
		b, err := json.Marshal(blocks)
		if err != nil {
			t.Fatal(err)
		}
		srcs["encoding/json: "+name] = b
	}
	for name, src := range srcs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var want, got []Block
			if err := json.Unmarshal(src, &want); err != nil {
				t.Fatal(err)
			}
			if err := (*blocksJSON)(&got).ScanBytes(src); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read %#v, want %#v", got, want)
			}
		})
	}
}

func TestBlocksJSONScanKeepsNothingOfSrc(t *testing.T) {
	t.Parallel()
	src := []byte(`[{"type":"tool_use","tool_use_id":"t","name":"n","input":{"k":"v"}}]`)
	var b []Block
	if err := (*blocksJSON)(&b).ScanBytes(src); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		src[i] = ' ' // the driver reuses its buffer
	}
	if got := string(b[0].Input); got != `{"k":"v"}` {
		t.Fatalf("input %q after the source changed", got)
	}
}

func TestUsageJSONReadsAsEncodingJSON(t *testing.T) {
	t.Parallel()
	tests := map[string][]byte{
		"zero":              []byte(`{"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0}`),
		"full":              []byte(`{"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 3, "cache_write_tokens": 1099511627776}`),
		"some":              []byte(`{"output_tokens": 7}`),
		"empty":             []byte(`{}`),
		"null":              []byte(`null`),
		"upper-case names":  []byte(`{"Input_Tokens": 5}`),
		"unknown member":    []byte(`{"input_tokens": 5, "server_tool_use": {"web_search_requests": 1}}`),
		"duplicate members": []byte(`{"input_tokens": 5, "input_tokens": 6}`),
	}
	for name, src := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var want, got MessageUsage
			if err := json.Unmarshal(src, &want); err != nil {
				t.Fatal(err)
			}
			if err := (*usageJSON)(&got).ScanBytes(src); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("read %+v, want %+v", got, want)
			}
		})
	}
}

func TestContentScanRejectsBadJSON(t *testing.T) {
	t.Parallel()
	tests := map[string][]byte{"not json": []byte(`[{`), "not an array": []byte(`{"type":"text"}`)}
	for name, src := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var b []Block
			if err := (*blocksJSON)(&b).ScanBytes(src); err == nil {
				t.Fatalf("no error for %s", src)
			}
		})
	}
}

// BenchmarkContentJSON reads a message's content and usage as a history
// read does, with encoding/json (what pgx uses) and with the adapters: a
// text message and an answer with a tool call, as Postgres writes jsonb.
func BenchmarkContentJSON(b *testing.B) {
	usage := []byte(`{"input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 0, "cache_write_tokens": 0}`)
	contents := map[string][]byte{
		"text": []byte(`[{"text": "what next?", "type": "text"}]`),
		"tool use": []byte(`[{"text": "let me look", "type": "text"}, {"name": "search", "type": "tool_use", "input": ` +
			`{"n": [1, 2.50, -3e2], "q": "<x>", "deep": {"a": null}}, "tool_use_id": "toolu_2"}]`),
	}
	for name, raw := range contents {
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c []Block
				var u MessageUsage
				if json.Unmarshal(raw, &c) != nil || json.Unmarshal(usage, &u) != nil {
					b.Fatal("decode")
				}
			}
		})
		b.Run(name+"/adapters", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c []Block
				var u MessageUsage
				if (*blocksJSON)(&c).ScanBytes(raw) != nil || (*usageJSON)(&u).ScanBytes(usage) != nil {
					b.Fatal("decode")
				}
			}
		})
	}
}
