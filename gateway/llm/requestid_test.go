package llm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/balletplanner/ballet/internal/requestid"
)

// TestClientSendsRequestID: a call sends the request id its context
// carries as X-Request-Id, and none when it carries none.
func TestClientSendsRequestID(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(requestid.Header)
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
		{requestid.With(context.Background(), "req-9"), "req-9"},
		{context.Background(), ""},
		{requestid.With(requestid.With(context.Background(), "req-9"), ""), ""},
	} {
		if _, err := c.Create(tt.ctx, Principal{Subject: "s", Organization: "o"}, req); err != nil {
			t.Fatal(err)
		}
		if h := <-got; h != tt.want {
			t.Errorf("X-Request-Id %q, want %q", h, tt.want)
		}
	}
}
