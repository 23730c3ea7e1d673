package gateway

import (
	"encoding/json"
	"testing"

	"github.com/balletplanner/ballet/gateway/internal/sse"
)

// TestScanMeterEventReadsEverydayEvents: the message_start and
// message_delta events real and fake upstreams write are read by the scan,
// not left to a decoder, into the meter decoding gives.
func TestScanMeterEventReadsEverydayEvents(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		meterScanCases[0].data, meterScanCases[1].data, meterScanCases[2].data,
		meterScanCases[3].data, meterScanCases[4].data,
		`{"type":"message_start","message":{"usage":{"input_tokens":5},"content":[{"type":"text","text":"x","nested":[1,-2.5e3,true,false,null,{"usage":{"input_tokens":99}}]}]}}`,
		`{"type":"message_delta","usage":{"output_tokens":5},"usage":{"input_tokens":2}}`,
		`{"type":"message_delta","usage":{"output_tokens":5,"output_tokens":null}}`,
		`{"type":"message_delta","type":"message_start","message":{"usage":{"input_tokens":-0}}}`,
		`{"type":"message_start","message":{"content":"a \"q\" \u00e9 \\ \/ \b\f\n\r\t ` + "\xff" + `"}}`,
	} {
		var e scannedEvent
		if !scanMeterEvent([]byte(data), &e) {
			t.Errorf("%q: left to a decoder", data)
			continue
		}
		var got, want meter
		got.observeScanned(&e)
		var d meterEvent
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		want.observeDecoded(&d)
		if got != want {
			t.Errorf("%q: scanned %+v, decoded %+v", data, got, want)
		}
	}
}

// TestScanMeterEventLeavesTheUnusualToADecoder: names json.Unmarshal
// matches loosely, nulls and numbers it refuses, errors, other event types
// and invalid JSON are not answered by the scan.
func TestScanMeterEventLeavesTheUnusualToADecoder(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		`{"type":"message_start","message":{"Usage":{"input_tokens":5}}}`,
		`{"TYPE":"message_start","message":{"usage":{"input_tokens":5}}}`,
		`{"type":"message_delta","usage":{"OUTPUT_TOKENS":5}}`,
		`{"type":"message_delta","usage":{"outputtokens":5}}`,
		`{"type":"message_delta","usage":{"output-tokens":5}}`,
		`{"typ\u0065":"message_delta","usage":{"output_tokens":5}}`,
		`{"type":"message\u005fdelta","usage":{"output_tokens":5}}`,
		`{"type":"message_delta","ſype":"x","usage":{"output_tokens":5}}`,
		`{"type":"message_delta","usage":null}`,
		`{"type":"message_delta","delta":{"stop_reason":null}}`,
		`{"type":"message_delta","delta":{"stop_reason":"caf\u00e9"}}`,
		`{"type":"message_delta","usage":{"output_tokens":1.0}}`,
		`{"type":"message_delta","usage":{"output_tokens":1e2}}`,
		`{"type":"message_delta","usage":{"output_tokens":99999999999999999999}}`,
		`{"type":"message_delta","usage":{"output_tokens":"5"}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`,
		`{"type":"content_block_delta","delta":{"text":"x"}}`,
		`{"type":"ping"}`,
		`{}`,
		`null`,
		``,
		`{"type":"message_delta","usage":{"output_tokens":5}} x`,
		`{"type":"message_delta","usage":{"output_tokens":5}`,
		`{"type":"message_delta","usage":{"output_tokens":5},}`,
		`{"type":"message_delta","x":[1,2,],"usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":tru,"usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":"a` + "\x01" + `b","usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":"\q","usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":"\u12","usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":01,"usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":-,"usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":1.,"usage":{"output_tokens":5}}`,
		`{"type":"message_delta","x":1e,"usage":{"output_tokens":5}}`,
	} {
		var e scannedEvent
		if scanMeterEvent([]byte(data), &e) {
			t.Errorf("%q: answered by the scan (%+v), want it left to a decoder", data, e)
		}
	}
}

// TestObserveRawAgreesWithEncodingJSON: whichever way observeRaw reads an
// event, the meter after it is the one encoding/json's decode gives.
func TestObserveRawAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range meterScanCases {
		checkRawAgrees(t, []byte(tt.data))
	}
}

// checkRawAgrees fails t unless observeRaw meters an event of data, as a
// message_start and as a message_delta, as encoding/json's decode of the
// event's data does.
func checkRawAgrees(t *testing.T, data []byte) {
	t.Helper()
	for _, name := range []string{"message_start", "message_delta"} {
		raw := sse.Raw{Name: name, Bytes: sse.AppendEvent(nil, sse.Event{Name: name, Data: data})}
		var got, want meter
		got.observeRaw(raw)
		var d meterEvent
		if json.Unmarshal(raw.Event().Data, &d) == nil {
			want.observeDecoded(&d)
		}
		if got != want {
			t.Errorf("%s %q: metered %+v, through encoding/json %+v", name, data, got, want)
		}
	}
}

func FuzzObserveRaw(f *testing.F) {
	for _, tt := range meterScanCases {
		f.Add([]byte(tt.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkRawAgrees(t, data) })
}
