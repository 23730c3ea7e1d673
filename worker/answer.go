package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/balletplanner/ballet/store"
)

// A model answer is stored as it came, except for what the database cannot
// hold or a later request cannot carry. Postgres text and jsonb cannot hold
// NUL characters: they are replaced with U+FFFD, and the transcript says
// so. A tool call whose name or input held NULs, whose input is not a JSON
// object, or whose input is larger than planner.max_tool_input_bytes is
// refused: it is stored with an error result and never run.

// refusal is why a tool call of an answer is not run.
type refusal struct {
	block  int // index of the tool_use block
	reason string
}

// screenAnswer makes blocks storable and returns the tool calls it refuses.
func screenAnswer(blocks []store.Block, maxInput int) ([]store.Block, []refusal) {
	out := make([]store.Block, 0, len(blocks))
	var refused []refusal
	for _, b := range blocks {
		switch b.Type {
		case store.BlockText:
			text, n := replaceNULs(b.Text)
			b.Text = text
			out = append(out, b)
			if n > 0 {
				out = append(out, store.Block{Type: store.BlockText, Text: nulNote(n)})
			}
		case store.BlockToolUse:
			if strings.ContainsRune(b.ToolUseID, 0) {
				b.ToolUseID = "" // uniqueToolUseIDs gives it an id of our own
			}
			if reason := screenToolUse(&b, maxInput); reason != "" {
				refused = append(refused, refusal{block: len(out), reason: reason})
			}
			out = append(out, b)
		default:
			out = append(out, b)
		}
	}
	return out, refused
}

// screenToolUse makes a tool call storable and says why it must not run,
// or "" when it may.
func screenToolUse(b *store.Block, maxInput int) string {
	name, nulName := replaceNULs(b.Name)
	b.Name = name
	if n := len(b.Input); n > maxInput {
		b.Input = placeholder(fmt.Sprintf("tool input of %d bytes", n))
		return fmt.Sprintf("tool input of %d bytes exceeds the limit of %d bytes (planner.max_tool_input_bytes); "+
			"the call was not run. Send a smaller input, e.g. split the work into several calls.", n, maxInput)
	}
	if !isObject(b.Input) {
		b.Input = placeholder("tool input that is not a JSON object")
		return "tool input is not a JSON object; the call was not run."
	}
	input, nulInput := inputWithoutNULs(b.Input)
	b.Input = input
	switch {
	case nulName > 0:
		return "tool name contains NUL characters (U+0000); the call was not run. The tool names are in your tool list."
	case nulInput > 0:
		return "tool input contains NUL characters (U+0000), which cannot be stored; the call was not run. " +
			"Call it again without them."
	}
	return ""
}

// refusedCalls are the records of the refused calls with their error
// results, once the blocks have their final tool_use ids.
func refusedCalls(blocks []store.Block, refused []refusal) []store.ToolCall {
	out := make([]store.ToolCall, 0, len(refused))
	for _, r := range refused {
		b := blocks[r.block]
		text, _ := json.Marshal(map[string]string{"error": r.reason})
		out = append(out, store.ToolCall{ToolUseID: b.ToolUseID, Name: b.Name, Input: b.Input, Done: true,
			Result: string(text), IsError: true})
	}
	return out
}

func nulNote(n int) string {
	s := "s were"
	if n == 1 {
		s = " was"
	}
	return fmt.Sprintf("[%d NUL character%s (U+0000) in this answer replaced with U+FFFD: they cannot be stored.]", n, s)
}

// replaceNULs replaces every NUL of s with U+FFFD and counts them.
func replaceNULs(s string) (string, int) {
	n := strings.Count(s, "\x00")
	if n == 0 {
		return s, 0
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD"), n
}

func isObject(input json.RawMessage) bool {
	t := bytes.TrimSpace(input)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// inputWithoutNULs replaces NULs in the strings and keys of a JSON object
// and counts them; an input without any is returned as it is.
func inputWithoutNULs(input json.RawMessage) (json.RawMessage, int) {
	if !bytes.Contains(input, []byte(`\u0000`)) {
		return input, 0
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return input, 0
	}
	n := 0
	v = walkStrings(v, func(s string) string {
		s, k := replaceNULs(s)
		n += k
		return s
	})
	if n == 0 {
		return input, 0 // an escaped backslash before u0000, not a NUL
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return placeholder("tool input"), n
	}
	return bytes.TrimSpace(buf.Bytes()), n
}

// walkStrings returns v with f applied to every string and object key.
func walkStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case []any:
		for i := range x {
			x[i] = walkStrings(x[i], f)
		}
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[f(k)] = walkStrings(e, f)
		}
		return m
	}
	return v
}

// placeholder stands in for a tool input that is not stored, and says so.
func placeholder(what string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"omitted": what + "; not stored"})
	return b
}
