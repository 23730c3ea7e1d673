package gateway

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// TestUpstreamErrorsKeepTheirChain: an upstream that cannot be reached is
// answered with the same message as ever, and the dial error stays in the
// chain for whoever logs or inspects it.
func TestUpstreamErrorsKeepTheirChain(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	up, err := NewUpstreams(base)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: cfg, http: newHTTPClient(cfg, nil), upstreams: up}
	_, retryable, _, err := s.attempt(context.Background(), anthropicProvider{}, &call{raw: []byte(`{}`), provider: "anthropic", baseURL: base})
	var ge *gatewayError
	if !errors.As(err, &ge) || ge.status != 502 || !retryable || !strings.HasPrefix(ge.Error(), "upstream anthropic unreachable: ") {
		t.Fatalf("attempt = %v (retryable %v), want a retryable 502 'upstream anthropic unreachable: ...'", err, retryable)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("the dial error is not in the chain of %v", err)
	}

	err = up.Check("ftp://example.com")
	if !errors.Is(err, ErrUpstreamNotAllowed) || err.Error() != "not an allowed upstream: scheme must be http or https" {
		t.Fatalf("Check = %v", err)
	}
}
