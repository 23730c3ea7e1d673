package llm

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/internal/cputime"
)

// benchStream is a one-round answer as the fake model streams it (keys in
// encoding/json's map order).
var benchStream = func() []byte {
	var b bytes.Buffer
	for _, ev := range [][2]string{
		{"message_start", `{"message":{"content":[],"id":"msg_0123456789","model":"claude-sonnet-4-5","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":3811,"input_tokens":42,"output_tokens":1}},"type":"message_start"}`},
		{"ping", `{"type":"ping"}`},
		{"content_block_start", `{"content_block":{"text":"","type":"text"},"index":0,"type":"content_block_start"}`},
		{"content_block_delta", `{"delta":{"text":"Here is the plan for ABC-12: the schema first, then the api.","type":"text_delta"},"index":0,"type":"content_block_delta"}`},
		{"content_block_delta", `{"delta":{"text":" Then the tests, and a changeset for the human to review.","type":"text_delta"},"index":0,"type":"content_block_delta"}`},
		{"content_block_stop", `{"index":0,"type":"content_block_stop"}`},
		{"message_delta", `{"delta":{"stop_reason":"end_turn","stop_sequence":null},"type":"message_delta","usage":{"output_tokens":25}}`},
		{"message_stop", `{"type":"message_stop"}`},
	} {
		b.WriteString("event: " + ev[0] + "\ndata: " + ev[1] + "\n\n")
	}
	return b.Bytes()
}()

// BenchmarkStreamCollect reads one streamed answer to its end.
//
//	go test ./gateway/llm -run '^$' -bench StreamCollect -benchmem
func BenchmarkStreamCollect(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		body := io.NopCloser(bytes.NewReader(benchStream))
		ctx, cancel := context.WithCancel(context.Background())
		s := &Stream{ctx: ctx, body: body, r: sse.NewReader(body), cancel: cancel,
			msg: MessageResponse{Content: Content{}}, partial: map[int]*strings.Builder{}}
		msg, err := s.Collect(func(string) {})
		if err != nil || len(msg.Content) != 1 {
			b.Fatal(msg, err)
		}
	}
}

// BenchmarkClientCall is one streamed model call of the planner's
// one-round turn through the client, against a server that drains the
// request and answers benchStream: encoding, the token, HTTP, reading the
// stream. The server's part is the same before and after a change.
//
//	go test ./gateway/llm -run '^$' -bench ClientCall -benchmem
func BenchmarkClientCall(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(benchStream)
	}))
	b.Cleanup(srv.Close)
	c := NewClient(srv.URL, []byte("signing-key"), nil)
	req := benchRequest(b)
	who := Principal{Organization: "0193f9c4-7a8e-7b3c-9d2e-5f6a7b8c9d0e", Session: "0193f9c4-7a8e-7b3c-9d2e-5f6a7b8c9d0f", ActingFor: "alice"}
	b.ReportAllocs()
	b.ResetTimer()
	start := cputime.Process()
	for range b.N {
		s, err := c.Stream(context.Background(), who, req)
		if err != nil {
			b.Fatal(err)
		}
		if msg, err := s.Collect(func(string) {}); err != nil || len(msg.Content) != 1 {
			b.Fatal(msg, err)
		}
	}
	b.ReportMetric(float64((cputime.Process()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
