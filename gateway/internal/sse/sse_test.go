package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		want  []Event
		final error
	}{
		{"events", "event: a\ndata: {\"x\":1}\n\n: comment\n\nevent: b\ndata: 1\ndata: 2\n\n", []Event{{"a", []byte(`{"x":1}`)}, {"b", []byte("1\n2")}}, io.EOF},
		{"crlf", "event: a\r\ndata: x\r\n\r\n", []Event{{"a", []byte("x")}}, io.EOF},
		{"cut inside an event", "event: a\ndata: x\n\nevent: b\ndata: y", []Event{{"a", []byte("x")}}, io.ErrUnexpectedEOF},
		{"long line", "data: " + strings.Repeat("z", 40000) + "\n\n", []Event{{"", []byte(strings.Repeat("z", 40000))}}, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewReader(strings.NewReader(tt.in))
			for i, w := range tt.want {
				ev, err := r.Next()
				if err != nil || ev.Name != w.Name || !bytes.Equal(ev.Data, w.Data) {
					t.Fatalf("event %d = %q %q, %v", i, ev.Name, ev.Data, err)
				}
			}
			if _, err := r.Next(); !errors.Is(err, tt.final) {
				t.Fatalf("end = %v, want %v", err, tt.final)
			}
		})
	}
}
