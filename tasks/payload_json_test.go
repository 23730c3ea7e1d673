package tasks

import (
	"encoding/json"
	"testing"

	"github.com/balletplanner/ballet/internal/jsontest"
)

func TestTurnPayloadJSON(t *testing.T) {
	t.Parallel()
	tests := map[string]TurnPayload{
		"zero":            {},
		"no request id":   {Session: "s", Turn: "t"},
		"with request id": {Session: "0b1e9e0c-4a8e-4a57-9a2b-1d7f3c6f0a01", Turn: "t<&>", RequestID: "req \"1\""},
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			jsontest.Same(t, got, want)
			back, err := ParseTurnPayload(want)
			if err != nil || back != p {
				t.Fatalf("parsed %+v, %v; want %+v", back, err, p)
			}
		})
	}
}

func TestParseTurnPayload(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      string
		want    TurnPayload
		wantErr bool
	}{
		"unknown member": {in: `{"session":"s","turn":"t","attempt":2}`, want: TurnPayload{Session: "s", Turn: "t"}},
		"not json":       {in: `{"session":`, wantErr: true},
		"wrong type":     {in: `{"session":1}`, wantErr: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTurnPayload([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseTurnPayload(%s) = %+v, %v", tt.in, got, err)
			}
		})
	}
}

func BenchmarkTurnPayload(b *testing.B) {
	p := TurnPayload{Session: "0b1e9e0c-4a8e-4a57-9a2b-1d7f3c6f0a01", Turn: "5d3c2b1a-0f9e-4d8c-b7a6-958473625140"}
	raw, _ := json.Marshal(p)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(p)
			var q TurnPayload
			_ = json.Unmarshal(raw, &q)
		}
	})
	b.Run("jsonv2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = p.Marshal()
			_, _ = ParseTurnPayload(raw)
		}
	})
}
