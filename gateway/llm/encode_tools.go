package llm

import (
	"bytes"
	"fmt"
	"sync/atomic"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// writeTools writes tools as a JSON array.
func writeTools(w *encoder, tools []Tool) {
	w.token(jsontext.BeginArray)
	for i := range tools {
		t := &tools[i]
		w.token(jsontext.BeginObject)
		w.str("name", t.Name)
		w.optStr("description", t.Description)
		if t.InputSchema == nil {
			w.name("input_schema")
			w.token(jsontext.Null)
		} else {
			w.raw("input_schema", t.InputSchema)
		}
		writeCacheControl(w, t.CacheControl)
		w.token(jsontext.EndObject)
	}
	w.token(jsontext.EndArray)
}

// wireTools are tools as sent.
type wireTools []Tool

// MarshalJSONTo writes the tools as a JSON array.
func (ts wireTools) MarshalJSONTo(e *jsontext.Encoder) error {
	w := &encoder{e: e}
	writeTools(w, ts)
	return w.err
}

// encodeTools returns tools encoded as a JSON array.
func encodeTools(tools []Tool) ([]byte, error) {
	b, err := jsonv2.Marshal(wireTools(tools), requestOptions)
	if err != nil {
		return nil, fmt.Errorf("llm: encode tools: %w", err)
	}
	return b, nil
}

// toolsCache holds the encodings of the tools last sent: a worker sends the
// same tools on every call (with or without a cache breakpoint on the
// last), so each call compares them (cheap) instead of encoding them again.
type toolsCache struct {
	last atomic.Pointer[[]*encodedTools] // newest first, at most maxToolSets
}

// maxToolSets is how many tool sets a toolsCache keeps.
const maxToolSets = 4

type encodedTools struct {
	tools []Tool // a deep copy of what was encoded
	json  []byte
}

// encode returns tools encoded, from the cache when they are tools
// encoded before.
func (c *toolsCache) encode(tools []Tool) ([]byte, error) {
	var kept []*encodedTools
	if p := c.last.Load(); p != nil {
		kept = *p
	}
	for _, e := range kept {
		if sameTools(e.tools, tools) {
			return e.json, nil
		}
	}
	b, err := encodeTools(tools)
	if err != nil {
		return nil, err
	}
	cp := make([]Tool, len(tools))
	for i, t := range tools {
		cp[i] = Tool{Name: t.Name, Description: t.Description, InputSchema: bytes.Clone(t.InputSchema)}
		if t.CacheControl != nil {
			cc := *t.CacheControl
			cp[i].CacheControl = &cc
		}
	}
	next := append([]*encodedTools{{tools: cp, json: b}}, kept[:min(len(kept), maxToolSets-1)]...)
	c.last.Store(&next)
	return b, nil
}

func sameTools(a, b []Tool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Description != y.Description || !bytes.Equal(x.InputSchema, y.InputSchema) ||
			(x.InputSchema == nil) != (y.InputSchema == nil) || (x.CacheControl == nil) != (y.CacheControl == nil) ||
			(x.CacheControl != nil && *x.CacheControl != *y.CacheControl) {
			return false
		}
	}
	return true
}
