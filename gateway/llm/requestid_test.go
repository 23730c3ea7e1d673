package llm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValidRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"req_0123abcd", true},
		{"trace-1:a.b_C", true},
		{strings.Repeat("a", MaxRequestIDLen), true},
		{"", false},
		{strings.Repeat("a", MaxRequestIDLen+1), false},
		{"a\tb", false},
		{"a\nX-Evil: 1", false},
		{"a b", false},
		{"idé", false},
		{"<script>", false},
	}
	for _, tt := range tests {
		if got := ValidRequestID(tt.id); got != tt.want {
			t.Errorf("ValidRequestID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// TestClientSendsRequestID: a call sends the request id its context
// carries as X-Request-Id, and none when it carries none.
func TestClientSendsRequestID(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(RequestIDHeader)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{}}`))
	}))
	t.Cleanup(hs.Close)
	c := NewClient(hs.URL, []byte("0123456789abcdef0123456789abcdef"), nil)
	req := MessageRequest{Model: "m", MaxTokens: 1}
	for _, tt := range []struct {
		ctx  context.Context
		want string
	}{
		{WithRequestID(context.Background(), "req-9"), "req-9"},
		{context.Background(), ""},
		{WithRequestID(WithRequestID(context.Background(), "req-9"), ""), ""},
	} {
		if _, err := c.Create(tt.ctx, Principal{Subject: "s", Organization: "o"}, req); err != nil {
			t.Fatal(err)
		}
		if h := <-got; h != tt.want {
			t.Errorf("X-Request-Id %q, want %q", h, tt.want)
		}
	}
}
