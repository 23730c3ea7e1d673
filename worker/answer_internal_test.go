package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

func TestScreenToolUse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, input, wantInput, wantReason string
	}{
		{"plain", `{"q":"a"}`, `{"q":"a"}`, ""},
		{"escaped backslash is no NUL", `{"q":"\\u0000"}`, `{"q":"\\u0000"}`, ""},
		{"NUL in a value", `{"q":"a\u0000b"}`, "{\"q\":\"a\uFFFDb\"}", "tool input contains NUL characters"},
		{"NUL in a key", `{"a\u0000":1.50}`, "{\"a\uFFFD\":1.50}", "tool input contains NUL characters"},
		{"not an object", `[1]`, `{"omitted":"tool input that is not a JSON object; not stored"}`, "not a JSON object"},
		{"not JSON", `{"q":`, `{"omitted":"tool input that is not a JSON object; not stored"}`, "not a JSON object"},
		{"too large", `{"q":"` + strings.Repeat("x", 2000) + `"}`, `{"omitted":"tool input of 2008 bytes; not stored"}`,
			"tool input of 2008 bytes exceeds the limit of 1024 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := store.Block{Type: store.BlockToolUse, Name: "lookup", Input: json.RawMessage(tc.input)}
			reason := screenToolUse(&b, 1024)
			if string(b.Input) != tc.wantInput {
				t.Errorf("input %s, want %s", b.Input, tc.wantInput)
			}
			if (tc.wantReason == "") != (reason == "") || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("reason %q, want %q", reason, tc.wantReason)
			}
		})
	}
}
