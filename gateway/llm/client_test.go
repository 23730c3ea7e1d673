package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A streamed call sends its whole request with its length, reads the
// answer, and the body it sent lets go of its bytes once written.
func TestStreamSendsTheWholeRequest(t *testing.T) {
	t.Parallel()
	var got []byte
	var length int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		length = r.ContentLength
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[]}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"}}`,
			`{"type":"message_stop"}`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", ev)
		}
	}))
	t.Cleanup(srv.Close)
	// A request larger than the connection's buffers.
	req := MessageRequest{Model: "m", MaxTokens: 10, Messages: []Message{{Role: RoleUser,
		Content: Content{{Type: BlockText, Text: strings.Repeat("long history ", 2000)}}}}}
	s, err := NewClient(srv.URL, []byte("k"), nil).Stream(context.Background(), Principal{Subject: "planner:s", Organization: "org"}, req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.Collect(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "hello" || msg.StopReason != StopEndTurn {
		t.Fatalf("answer %+v", msg)
	}
	req.Stream = true
	want, _ := json.Marshal(req)
	if !bytes.Equal(got, want) || length != int64(len(want)) {
		t.Fatalf("gateway got %d bytes (Content-Length %d), want the %d of the encoded request", len(got), length, len(want))
	}
}

// The body a call sends drops its bytes once they are written, and again
// when closed; GetBody encodes the request anew.
func TestSentBodyLetsGoOfItsBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		read func(*sentBody) ([]byte, error)
	}{
		{"read", func(b *sentBody) ([]byte, error) { return io.ReadAll(b) }},
		{"write to", func(b *sentBody) ([]byte, error) {
			var buf bytes.Buffer
			_, err := b.WriteTo(&buf)
			return buf.Bytes(), err
		}},
		{"closed unread", func(b *sentBody) ([]byte, error) { return []byte("0123456789"), b.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := &sentBody{b: []byte("0123456789")}
			got, err := tc.read(b)
			if err != nil || string(got) != "0123456789" {
				t.Fatalf("read %q, %v", got, err)
			}
			if b.b != nil {
				t.Fatalf("the body still holds %q after it was sent", b.b)
			}
			if n, err := b.Read(make([]byte, 4)); n != 0 || err != io.EOF {
				t.Fatalf("read after the end: %d, %v; want 0, EOF", n, err)
			}
		})
	}
}
