package gateway

import (
	"bytes"
	"strconv"
	"sync"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/balletplanner/ballet/gateway/internal/sse"
)

// tokenMeterDecoders keeps jsontext decoders for scanMeterEventTokens, so
// that the comparison is with a pooled decoder, its best case.
var tokenMeterDecoders = sync.Pool{New: func() any {
	r := new(tokenMeterDecoder)
	r.d = jsontext.NewDecoder(&r.r)
	return r
}}

type tokenMeterDecoder struct {
	r bytes.Reader
	d *jsontext.Decoder
}

// scanMeterEventTokens is scanMeterEvent written as a walk over jsontext's
// tokens: the alternative BenchmarkMeterScanVsJSONText weighs the scan
// against. It reads the same members and, like the scan, gives up on an
// error member or a figure that is not an integer.
func scanMeterEventTokens(data []byte, e *scannedEvent) bool {
	td := tokenMeterDecoders.Get().(*tokenMeterDecoder)
	defer tokenMeterDecoders.Put(td)
	td.r.Reset(data)
	d := td.d
	d.Reset(&td.r)
	usage := func(u *scannedUsage) bool {
		u.present = true
		if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
			return false
		}
		for d.PeekKind() != '}' {
			t, err := d.ReadToken()
			if err != nil {
				return false
			}
			name := t.String()
			v, err := d.ReadValue()
			if err != nil {
				return false
			}
			for k, n := range usageNames {
				if name == n {
					switch v.Kind() {
					case 'n':
						u.set[k], u.v[k] = false, 0
					case '0':
						x, err := strconv.ParseInt(string(v), 10, 64)
						if err != nil {
							return false
						}
						u.set[k], u.v[k] = true, x
					default:
						return false
					}
				}
			}
		}
		_, err := d.ReadToken()
		return err == nil
	}
	object := func(member func(name string) bool) bool {
		if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
			return false
		}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil || !member(name.String()) {
				return false
			}
		}
		_, err := d.ReadToken()
		return err == nil
	}
	skip := func() bool { return d.SkipValue() == nil }
	ok := object(func(name string) bool {
		switch name {
		case "type":
			t, err := d.ReadToken()
			e.typ = t.String()
			return err == nil && t.Kind() == '"'
		case "message":
			return object(func(name string) bool {
				if name == "usage" {
					return usage(&e.msgUsage)
				}
				return skip()
			})
		case "usage":
			return usage(&e.usage)
		case "delta":
			return object(func(name string) bool {
				if name != "stop_reason" {
					return skip()
				}
				t, err := d.ReadToken()
				if err != nil {
					return false
				}
				if t.Kind() == '"' {
					e.stopReason = t.String()
				}
				return true
			})
		case "error":
			return false
		}
		return skip()
	})
	return ok && (e.typ == "message_start" || e.typ == "message_delta")
}

func TestScanMeterEventTokensAgrees(t *testing.T) {
	t.Parallel()
	for _, tt := range meterScanCases[:4] {
		var scanned, tokens scannedEvent
		if !scanMeterEvent([]byte(tt.data), &scanned) || !scanMeterEventTokens([]byte(tt.data), &tokens) {
			t.Fatalf("%s: not read by both", tt.data)
		}
		if scanned != tokens {
			t.Errorf("%s: scan %+v, jsontext %+v", tt.data, scanned, tokens)
		}
	}
}

// BenchmarkMeterScanVsJSONText is the meter's read of message_start and
// message_delta three ways: the one-pass scan (production), a walk over
// jsontext's tokens, and the library decode the scan falls back to.
func BenchmarkMeterScanVsJSONText(b *testing.B) {
	for _, bb := range []struct{ name, data string }{
		{"message_start", meterScanCases[0].data},
		{"message_delta", meterScanCases[2].data},
	} {
		data := []byte(bb.data)
		raw := sse.Raw{Name: bb.name, Bytes: sse.AppendEvent(nil, sse.Event{Name: bb.name, Data: data})}
		b.Run(bb.name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var e scannedEvent
				if !scanMeterEvent(data, &e) {
					b.Fatal("not scanned")
				}
			}
		})
		b.Run(bb.name+"/jsontext", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var e scannedEvent
				if !scanMeterEventTokens(data, &e) {
					b.Fatal("not read")
				}
			}
		})
		b.Run(bb.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m meter
				m.observe(raw.Event())
			}
		})
	}
}
