package tasks

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/internal/jsontest"

	"github.com/balletplanner/ballet/store"
)

// tricky holds every character encoding/json escapes.
const tricky = "q\" b\\ <a>&\n\t\x01 \u2028 é \xff"

// filled sets every field of v (a pointer to a struct) to a value that is
// not zero, so that a field added to store.Output or store.Block that the
// encoder misses (or writes otherwise than encoding/json) fails the test
// below.
func filled(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(time.Date(2026, 12, 1, 19, 4, 5, 120_000_000, time.FixedZone("x", 3600))))
		case f.Type() == reflect.TypeFor[json.RawMessage]():
			f.Set(reflect.ValueOf(json.RawMessage(` {"k": "<v>", "n": [1, 2]} `)))
		case f.Kind() == reflect.String:
			f.SetString(tricky + v.Type().Field(i).Name)
		case f.Kind() == reflect.Int64:
			f.SetInt(int64(i + 1))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Int64:
			n := int64(-7)
			f.Set(reflect.ValueOf(&n))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			s := reflect.MakeSlice(f.Type(), 2, 2)
			filled(t, s.Index(0))
			f.Set(s)
		default:
			t.Fatalf("%s.%s: a field of type %s the test cannot fill: teach this test (and encodeOutput's options if need be)", v.Type(), v.Type().Field(i).Name, f.Type())
		}
	}
}

func TestEncodeOutputMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	var full store.Output
	filled(t, reflect.ValueOf(&full).Elem())
	pos := int64(0)
	tests := map[string]store.Output{
		"every field":   full,
		"zero":          {},
		"text delta":    {Session: "s", Turn: "t", Type: store.OutputText, Text: "hello <world>"},
		"position zero": {Session: "s", Turn: "t", Type: store.OutputQueued, Cursor: 3, Position: &pos, CreatedAt: time.Unix(1700000000, 0).UTC()},
		"message": {Session: "s", Turn: "t", Type: store.OutputMessage, Role: "assistant",
			Content: []store.Block{{Type: store.BlockText, Text: "x"}, {Type: store.BlockToolUse, ToolUseID: "tu", Name: "n", Input: json.RawMessage(`{}`)}}},
		"empty content": {Session: "s", Turn: "t", Type: store.OutputMessage, Content: []store.Block{}, Input: json.RawMessage{}},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeOutput(&o)
			if err != nil {
				t.Fatal(err)
			}
			if got[len(got)-1] != '}' {
				t.Fatalf("%q does not end the object (publishText appends to it)", got)
			}
			jsontest.Same(t, got, want)
			var back store.Output
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzEncodeOutput checks encodeOutput against encoding/json with the
// fuzzed text in every string and the fuzzed raw JSON in every input: the
// same value, or an error on both sides.
func FuzzEncodeOutput(f *testing.F) {
	for _, s := range []string{"", "plain", tricky, "\u2028", "\xed\xa0\x80"} {
		f.Add(s, []byte(`{}`), int64(0))
	}
	for _, raw := range []string{"", ` { "a" : [1, 2.5e3, -0, "<&>", null, true] } `, `{"a":`, `nope`, "[\"\xff\"]", `{"a":1,"a":2}`, ` `} {
		f.Add("s", []byte(raw), int64(-1))
	}
	f.Fuzz(func(t *testing.T, s string, raw []byte, n int64) {
		o := store.Output{Session: s, Turn: s, Cursor: n, Type: s, Text: s, Tool: s, ToolUseID: s, Input: raw, IsError: n < 0,
			Seq: n, Position: &n, Role: s, Content: []store.Block{{Type: s, Text: s, ToolUseID: s, Name: s, Input: raw, IsError: n > 0}},
			CreatedAt: time.Unix(n%(1<<34), n%1e9)}
		want, werr := json.Marshal(o)
		got, gerr := encodeOutput(&o)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%q, %q: error %v, encoding/json's %v", s, raw, gerr, werr)
		}
		if werr == nil {
			jsontest.Same(t, got, want)
		}
	})
}

func TestEncodeOutputRefusesWhatEncodingJSONRefuses(t *testing.T) {
	t.Parallel()
	tests := map[string]store.Output{
		"input":      {Input: json.RawMessage(`{"a":`)},
		"block":      {Content: []store.Block{{Input: json.RawMessage(`nope`)}}},
		"year 10000": {CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := json.Marshal(o); err == nil {
				t.Fatal("encoding/json encodes it")
			}
			b, err := encodeOutput(&o)
			if err == nil {
				t.Fatalf("encoded %s", b)
			}
			if !strings.HasPrefix(err.Error(), "tasks: encode output: ") {
				t.Fatalf("error %q", err)
			}
			t.Log(err)
		})
	}
}

func BenchmarkEncodeOutput(b *testing.B) {
	o := store.Output{Session: "0193f9c4-7a8e-7b3c-9d2e-5f6a7b8c9d0e", Turn: "0193f9c4-7a8e-7b3c-9d2e-5f6a7b8c9d0f",
		Type: store.OutputText, Text: strings.Repeat("Here is the plan for ABC-12. ", 4)}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(o)
		}
	})
	b.Run("jsonv2", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = encodeOutput(&o)
		}
	})
}
