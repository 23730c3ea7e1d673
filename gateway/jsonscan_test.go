package gateway

import (
	"encoding/json"
	"testing"
)

// validJSONCases are texts json.Valid accepts and refuses: everyday
// events, each JSON shape, and the near misses around them.
var validJSONCases = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","usage":{"input_tokens":12,"output_tokens":1}}}`,
	` {"a":[1,-2.5e+3,0,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"]} `,
	`"just a string"`, `12`, `-0.0E-0`, `[]`, `{}`, `[[[[]]]]`, `null`,
	"\"\xff\xfe invalid UTF-8\"",
	``, ` `, `{`, `}`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{a:1}`,
	`01`, `1.`, `.5`, `1e`, `-`, `+1`, `0x10`, `1e+`, `tru`, `truex`, `nul`,
	`"unterminated`, "\"ctl \x01\"", `"bad \x escape"`, `"\u12"`, `"\u12G4"`,
	`{"a":1} {"b":2}`, `{"a":1}x`, `[1]]`,
	"[" + deepArray(70) + "]",
}

// deepArray nests n arrays, deeper than the scanner reads itself.
func deepArray(n int) string {
	s := ""
	for range n {
		s = "[" + s + "]"
	}
	return s
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, data := range validJSONCases {
		if got, want := validJSON([]byte(data)), json.Valid([]byte(data)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid %v", data, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, data := range validJSONCases {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid %v", data, got, want)
		}
	})
}
