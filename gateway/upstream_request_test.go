package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
)

// TestPostRequestMatchesNewRequest: an upstream request built on a cached
// URL is the one http.NewRequestWithContext builds, field for field, its
// body and GetBody's copy alike; a URL NewRequest refuses is refused with
// its error.
func TestPostRequestMatchesNewRequest(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "call")
	tests := []struct {
		name, base, path string
		body             []byte
	}{
		{"anthropic", "http://127.0.0.1:8080", "/v1/messages", []byte(`{"model":"m"}`)},
		{"path prefix", "https://api.example.test/proxy/v1", "/chat/completions", []byte(`{}`)},
		{"empty port", "http://upstream:", "/v1/messages", []byte(`x`)},
		{"ipv6 empty port", "http://[::1]:", "/embeddings", []byte(`x`)},
		{"ipv6 port", "http://[::1]:9000", "/embeddings", []byte(`x`)},
		{"escaped path", "http://h/a%2Fb", "/v1/messages", []byte(`x`)},
		{"empty body", "http://h", "/v1/messages", nil},
		{"control character", "http://h\x7f", "/v1/messages", []byte(`x`)},
		{"bad host", "http://[::1", "/v1/messages", []byte(`x`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, wantErr := http.NewRequestWithContext(ctx, http.MethodPost, tt.base+tt.path, bytes.NewReader(tt.body))
			for range 2 { // built, then from the cached URL
				got, err := postRequest(ctx, tt.base, tt.path, tt.body)
				if wantErr != nil || err != nil {
					if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
						t.Fatalf("error %v, want %v", err, wantErr)
					}
					continue
				}
				if got.Method != want.Method || got.URL.String() != want.URL.String() || got.Host != want.Host ||
					got.Proto != want.Proto || got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor ||
					got.ContentLength != want.ContentLength || len(got.Header) != 0 || got.Context() != ctx {
					t.Fatalf("request %s %s host %q %s len %d header %v, want %s %s host %q %s len %d",
						got.Method, got.URL, got.Host, got.Proto, got.ContentLength, got.Header,
						want.Method, want.URL, want.Host, want.Proto, want.ContentLength)
				}
				if (got.Body == http.NoBody) != (want.Body == http.NoBody) {
					t.Fatalf("body NoBody %v, want %v", got.Body == http.NoBody, want.Body == http.NoBody)
				}
				first := readAllClose(t, got.Body)
				again, err := got.GetBody()
				if err != nil {
					t.Fatal(err)
				}
				if second := readAllClose(t, again); !bytes.Equal(first, tt.body) || !bytes.Equal(second, tt.body) {
					t.Fatalf("body %q, then GetBody %q, want %q", first, second, tt.body)
				}
			}
		})
	}
}

// TestEndpointURLIsNotShared: each request to an endpoint has a URL of
// its own, so that changing one leaves the next untouched, and requests to
// two endpoints go to their own hosts.
func TestEndpointURLIsNotShared(t *testing.T) {
	t.Parallel()
	a, _ := postRequest(context.Background(), "http://one.test", "/v1/messages", nil)
	a.URL.Host, a.URL.Path = "changed.test", "/changed"
	b, _ := postRequest(context.Background(), "http://one.test", "/v1/messages", nil)
	c, _ := postRequest(context.Background(), "http://two.test", "/v1/messages", nil)
	if a.URL == b.URL || b.URL.String() != "http://one.test/v1/messages" {
		t.Errorf("after a change to another request's URL, the next is %s, want http://one.test/v1/messages", b.URL)
	}
	if c.URL.String() != "http://two.test/v1/messages" {
		t.Errorf("second endpoint %s, want http://two.test/v1/messages", c.URL)
	}
}

func readAllClose(t *testing.T, r io.ReadCloser) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return b
}
