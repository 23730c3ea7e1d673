package gateway

import (
	"io"
	"testing"
)

// endTracker is a body that hands out its parts one Read each and
// remembers whether it was read to its end.
type endTracker struct {
	parts  []string
	atEOF  bool
	closed bool
}

func (b *endTracker) Read(p []byte) (int, error) {
	if len(b.parts) == 0 {
		b.atEOF = true
		return 0, io.EOF
	}
	n := copy(p, b.parts[0])
	b.parts = b.parts[1:]
	return n, nil
}

func (b *endTracker) Close() error { b.closed = true; return nil }

// TestAnthropicEventsCloseReadsTheEndAfterMessageStop: after message_stop
// close reads the body to its end (which keeps an HTTP connection for the
// next call) and reports the end once read; before it, close only closes.
func TestAnthropicEventsCloseReadsTheEndAfterMessageStop(t *testing.T) {
	t.Parallel()
	start := "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, tt := range []struct {
		name      string
		parts     []string
		reads     int // events to read before close
		wantEnded bool
		wantEOF   bool
	}{
		{"end after message_stop", []string{start, stop, ""}, 2, false, true},
		{"closed before message_stop", []string{start, stop}, 1, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &endTracker{parts: tt.parts}
			src := anthropicProvider{}.events(nil, body)
			for range tt.reads {
				if _, err := src.next(); err != nil {
					t.Fatal(err)
				}
			}
			if src.ended() != tt.wantEnded {
				t.Fatalf("ended = %v, want %v", src.ended(), tt.wantEnded)
			}
			src.close()
			if body.atEOF != tt.wantEOF || !body.closed {
				t.Fatalf("read to the end %v, closed %v; want %v, true", body.atEOF, body.closed, tt.wantEOF)
			}
		})
	}
}
