package llm

import (
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MarshalJSONTo writes the block as jsonv2 calls it (no second pass over
// the bytes): the members of its type, "text" kept on text blocks even when
// empty and "input" on tool_use blocks ({} when unset).
func (b *ContentBlock) MarshalJSONTo(e *jsontext.Encoder) error {
	w := &encoder{e: e}
	writeBlock(w, b)
	return w.err
}

// MarshalJSON writes the block for encoding/json, as MarshalJSONTo does.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	return jsonv2.Marshal(&b, requestOptions)
}

// emptyObject is the input of a tool_use block that has none.
var emptyObject = []byte(`{}`)

// writeContent writes c as a JSON array of blocks; nil is null.
func writeContent(w *encoder, c Content) {
	if c == nil {
		w.token(jsontext.Null)
		return
	}
	w.token(jsontext.BeginArray)
	for i := range c {
		writeBlock(w, &c[i])
	}
	w.token(jsontext.EndArray)
}

// writeBlock writes one block: the members of its type.
func writeBlock(w *encoder, b *ContentBlock) {
	w.token(jsontext.BeginObject)
	w.str("type", b.Type)
	switch b.Type {
	case BlockText:
		w.str("text", b.Text)
	case BlockToolUse:
		w.str("id", b.ID)
		w.str("name", b.Name)
		input := []byte(b.Input)
		if len(input) == 0 {
			input = emptyObject
		}
		w.raw("input", input)
	default:
		w.optStr("text", b.Text)
		w.optStr("id", b.ID)
		w.optStr("name", b.Name)
		if len(b.Input) > 0 {
			w.raw("input", b.Input)
		}
		w.optStr("tool_use_id", b.ToolUseID)
		if len(b.Content) > 0 {
			w.name("content")
			writeContent(w, b.Content)
		}
		w.boolTrue("is_error", b.IsError)
		w.optStr("thinking", b.Thinking)
		w.optStr("signature", b.Signature)
	}
	writeCacheControl(w, b.CacheControl)
	w.token(jsontext.EndObject)
}

// writeCacheControl writes the cache_control member of c, none when nil.
func writeCacheControl(w *encoder, c *CacheControl) {
	if c == nil {
		return
	}
	w.name("cache_control")
	w.token(jsontext.BeginObject)
	w.str("type", c.Type)
	w.optStr("ttl", c.TTL)
	w.token(jsontext.EndObject)
}
