package llm

import (
	"bytes"
	"fmt"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// A model request is written token by token on a jsontext.Encoder
// (go-json-experiment) straight into the pooled body buffer: reflection
// and the nested MarshalJSON calls of every content block (each compacted
// again by encoding/json) were most of a turn's encoding. The tools (the
// same dozen JSON schemas on every call) are encoded once per tool set and
// spliced in already encoded (toolsCache, appendRequest).

// requestOptions are the options a request is encoded with: its members
// are named by the code below, never twice (no duplicate check, and raw
// values keep theirs as encoding/json does), and invalid UTF-8 is written
// as U+FFFD, as encoding/json does.
var requestOptions = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// appendRequest appends r as JSON; tools, when not nil, is r.Tools
// already encoded, spliced in as the last member: jsontext would check
// every byte of it again (more than half the encoding), and it is what
// encodeTools wrote.
func appendRequest(dst []byte, r *MessageRequest, tools []byte) ([]byte, error) {
	start := len(dst)
	m := requestMarshals.Get().(*requestMarshal)
	defer m.release()
	m.buf = *bytes.NewBuffer(dst) // the encoder appends straight into it
	m.q = wireRequest{r: r, skipTools: tools != nil}
	if err := jsonv2.MarshalWrite(&m.buf, &m.q, requestOptions); err != nil {
		return nil, fmt.Errorf("llm: encode request: %w", err)
	}
	b := m.buf.Bytes()
	if tools == nil || len(r.Tools) == 0 {
		return b, nil
	}
	if len(b) < start+2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("llm: encode request: %q is not an object", b[start:])
	}
	b = append(b[:len(b)-1], `,"tools":`...)
	return append(append(b, tools...), '}'), nil
}

// requestMarshal is what a MarshalWrite of a request takes the address of,
// pooled so that an encoding allocates nothing of its own.
type requestMarshal struct {
	buf bytes.Buffer
	q   wireRequest
}

var requestMarshals = sync.Pool{New: func() any { return new(requestMarshal) }}

// release drops the references to the caller's request and buffer and
// gives m back.
func (m *requestMarshal) release() {
	*m = requestMarshal{}
	requestMarshals.Put(m)
}

// wireRequest is a request as sent; without its tools when skipTools.
type wireRequest struct {
	r         *MessageRequest
	skipTools bool
}

// MarshalJSONTo writes the request: the members of MessageRequest's tags,
// the omitempty ones left out when empty.
func (q *wireRequest) MarshalJSONTo(e *jsontext.Encoder) error {
	r := q.r
	w := &encoder{e: e}
	w.token(jsontext.BeginObject)
	w.str("model", r.Model)
	w.name("max_tokens")
	w.token(jsontext.Int(int64(r.MaxTokens)))
	if len(r.System) > 0 {
		w.name("system")
		writeContent(w, r.System)
	}
	w.name("messages")
	writeMessages(w, r.Messages)
	if len(r.Tools) > 0 && !q.skipTools {
		w.name("tools")
		writeTools(w, r.Tools)
	}
	writeOptional(w, r)
	w.token(jsontext.EndObject)
	return w.err
}

// writeMessages writes msgs as a JSON array; nil is null.
func writeMessages(w *encoder, msgs []Message) {
	if msgs == nil {
		w.token(jsontext.Null)
		return
	}
	w.token(jsontext.BeginArray)
	for i := range msgs {
		m := &msgs[i]
		w.token(jsontext.BeginObject)
		w.str("role", m.Role)
		w.name("content")
		writeContent(w, m.Content)
		w.token(jsontext.EndObject)
	}
	w.token(jsontext.EndArray)
}

// writeOptional writes the members that are mostly unset; the ones of
// plain types as jsonv2 marshals them.
func writeOptional(w *encoder, r *MessageRequest) {
	if r.ToolChoice != nil {
		w.marshal("tool_choice", r.ToolChoice)
	}
	if r.Stream {
		w.name("stream")
		w.token(jsontext.True)
	}
	if len(r.StopSequences) > 0 {
		w.marshal("stop_sequences", r.StopSequences)
	}
	if r.Temperature != nil {
		w.marshal("temperature", r.Temperature)
	}
	if r.TopP != nil {
		w.marshal("top_p", r.TopP)
	}
	if r.TopK != nil {
		w.marshal("top_k", r.TopK)
	}
	if r.Metadata != nil {
		w.marshal("metadata", r.Metadata)
	}
	if len(r.Thinking) > 0 {
		w.raw("thinking", r.Thinking)
	}
}

// encoder writes on e until the first error, which it keeps: the shapes
// below read as their JSON, with one error check at the end.
type encoder struct {
	e   *jsontext.Encoder
	err error
}

// token writes t.
func (w *encoder) token(t jsontext.Token) {
	if w.err == nil {
		w.err = w.e.WriteToken(t)
	}
}

// name writes an object member's name.
func (w *encoder) name(n string) { w.token(jsontext.String(n)) }

// str writes the member name with the string s.
func (w *encoder) str(name, s string) {
	w.name(name)
	w.token(jsontext.String(s))
}

// optStr writes the member name with s unless s is empty (omitempty).
func (w *encoder) optStr(name, s string) {
	if s != "" {
		w.str(name, s)
	}
}

// boolTrue writes the member name as true when b is (omitempty).
func (w *encoder) boolTrue(name string, b bool) {
	if b {
		w.name(name)
		w.token(jsontext.True)
	}
}

// raw writes the member name with v, JSON already encoded: checked and
// compacted; invalid JSON is an error (jsonv2's names where, as a JSON
// pointer).
func (w *encoder) raw(name string, v []byte) {
	w.name(name)
	if w.err == nil {
		w.err = w.e.WriteValue(v)
	}
}

// marshal writes the member name with v as jsonv2 marshals it.
func (w *encoder) marshal(name string, v any) {
	w.name(name)
	if w.err == nil {
		w.err = jsonv2.MarshalEncode(w.e, v)
	}
}
