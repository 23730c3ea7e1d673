package gateway

import (
	"encoding/json"
	"testing"

	"github.com/balletplanner/ballet/gateway/internal/sse"
)

// meterScanCases are event data: those of real and fake streams, and
// others (case-folded or duplicate names, nulls, other types, invalid
// JSON) where encoding/json's answers are easy to miss.
var meterScanCases = []struct {
	data string
	ok   bool // encoding/json decodes it
}{
	{`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}`, true},
	{`{"message":{"content":[],"id":"msg_fake000001","model":"claude-bench","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":50,"output_tokens":1}},"type":"message_start"}`, true},
	{`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`, true},
	{`{"delta":{"stop_reason":"tool_use","stop_sequence":null},"type":"message_delta","usage":{"input_tokens":3,"output_tokens":60,"cache_read_input_tokens":7}}`, true},
	{` { "type" : "message_delta" , "delta" : { "stop_reason" : "a_new_reason" } , "usage" : { "output_tokens" : 0 } } `, true},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \"there\" \u00e9\ud83d\ude00"}}`, true},
	{`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1"}}`, true},
	{`{"type":"message_start","message":{"usage":{"input_tokens":5},"content":[{"type":"text","text":"x","nested":[1,-2.5e3,true,false,null,{"usage":{"input_tokens":99}}]}]}}`, true},
	{`{"type":"ping"}`, true},
	{`{}`, true},
	{`{"type":"message_delta","usage":{"output_tokens":-4}}`, true},
	{`{"type":"message_start","message":{"Usage":{"input_tokens":5}}}`, true},
	{`{"TYPE":"message_start","message":{"usage":{"input_tokens":5}}}`, true},
	{`{"type":"message_delta","usage":{"OUTPUT_TOKENS":5}}`, true},
	{`{"type":"message_delta","usage":{"output_tokens":5},"usage":{"input_tokens":2}}`, true},
	{`{"type":"message_delta","usage":{"output_tokens":5,"output_tokens":6}}`, true},
	{`{"type":"message_delta","type":"message_start"}`, true},
	{`{"type":"message_delta","usage":null}`, true},
	{`{"type":"message_delta","usage":{"output_tokens":null}}`, true},
	{`{"type":"message_delta","usage":{"output_tokens":1.0}}`, false},
	{`{"type":"message_delta","usage":{"output_tokens":1e2}}`, false},
	{`{"type":"message_delta","usage":{"output_tokens":99999999999999999999}}`, false},
	{`{"type":"message_delta","usage":{"output_tokens":"5"}}`, false},
	{`{"type":"message\u005fdelta","usage":{"output_tokens":5}}`, true},
	{`{"typ\u0065":"message_delta","usage":{"output_tokens":5}}`, true},
	{`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":5}}`, true},
	{`{"type":"message_delta","delta":{"stop_reason":"x","stop_reason":"y"}}`, true},
	{`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`, true},
	{`{"type":"message_delta","usage":{"output_tokens":5}} x`, false},
	{`{"type":"message_delta","usage":{"output_tokens":5}`, false},
	{`{"type":"message_delta","usage":{"output_tokens":5},}`, false},
	{`{"type":"message_delta","x":[1,2,],"usage":{"output_tokens":5}}`, false},
	{`{"type":"message_delta","x":tru,"usage":{"output_tokens":5}}`, false},
	{`{"type":"message_delta","x":"a` + "\x01" + `b","usage":{"output_tokens":5}}`, false},
	{`{"type":"message_delta","x":"\q","usage":{"output_tokens":5}}`, false},
	{`{"type":"message_delta","x":01,"usage":{"output_tokens":5}}`, false},
	{`{"type":"message_delta","ſype":"x","usage":{"output_tokens":5}}`, true},
	{`{"type":"message_start","message":[]}`, false},
	{`{"type":"content_block_delta","delta":{"text":5}}`, false},
	{`[]`, false},
	{`null`, true},
	{``, false},
}

// checkDecodeAgrees fails t unless decodeMeterEvent decodes data exactly
// when encoding/json does, and the meter after it is encoding/json's. It
// returns whether data decoded.
func checkDecodeAgrees(t *testing.T, data []byte) bool {
	t.Helper()
	var e meterEvent
	ok := decodeMeterEvent(data, &e)
	var want meterEvent
	if wantOK := json.Unmarshal(data, &want) == nil; ok != wantOK {
		t.Errorf("%q: decoded %v, encoding/json decodes it %v", data, ok, wantOK)
	}
	var got, slow meter
	if ok {
		got.observeDecoded(&e)
	}
	slow.observe(sse.Event{Name: "message_delta", Data: data})
	if got != slow {
		t.Errorf("%q: metered %+v, through encoding/json %+v", data, got, slow)
	}
	return ok
}

// TestDecodeMeterEventAgreesWithEncodingJSON: the library decode meters
// every event exactly as encoding/json does, and fails where it fails.
func TestDecodeMeterEventAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range meterScanCases {
		if ok := checkDecodeAgrees(t, []byte(tt.data)); ok != tt.ok {
			t.Errorf("%q: decoded %v, want %v", tt.data, ok, tt.ok)
		}
	}
}

// TestObserveRawMetersAsDecoding: a stream's events metered raw give the
// usage that decoding each of them gives.
func TestObserveRawMetersAsDecoding(t *testing.T) {
	t.Parallel()
	for _, tt := range meterScanCases {
		for _, name := range []string{"message_start", "message_delta"} {
			raw := sse.Raw{Name: name, Bytes: sse.AppendEvent(nil, sse.Event{Name: name, Data: []byte(tt.data)})}
			var got, want meter
			got.observeRaw(raw)
			want.observe(raw.Event())
			if got != want {
				t.Errorf("%s %q: raw %+v, decoded %+v", name, tt.data, got, want)
			}
		}
	}
}

func FuzzDecodeMeterEvent(f *testing.F) {
	for _, tt := range meterScanCases {
		f.Add([]byte(tt.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeAgrees(t, data) })
}

// BenchmarkMeterRaw is the meter's read of a stream's message_start and
// message_delta, as the relay reads them.
func BenchmarkMeterRaw(b *testing.B) {
	for _, bb := range []struct{ name, data string }{
		{"message_start", meterScanCases[0].data},
		{"message_delta", meterScanCases[2].data},
	} {
		raw := sse.Raw{Name: bb.name, Bytes: sse.AppendEvent(nil, sse.Event{Name: bb.name, Data: []byte(bb.data)})}
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m meter
				m.observeRaw(raw)
			}
		})
	}
}
