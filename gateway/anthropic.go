package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
)

// anthropicProvider passes calls through to an Anthropic Messages API.
// The body goes up as the caller sent it and the answer comes back as the
// upstream sent it; the gateway only reads the usage as it passes.
type anthropicProvider struct{}

func (anthropicProvider) prepare(*call) error { return nil }

func (anthropicProvider) request(ctx context.Context, c *call) (*http.Request, error) {
	return anthropicRequest(ctx, c, "/v1/messages")
}

// anthropicRequest posts the call's body as it is to path of the Anthropic
// API at the credential's base URL, with its key, version and betas.
func anthropicRequest(ctx context.Context, c *call, path string) (*http.Request, error) {
	base := strings.TrimSuffix(strings.TrimRight(c.baseURL, "/"), "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(c.raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", c.apiKey)
	version := c.header.Get("anthropic-version")
	if version == "" {
		version = llm.AnthropicVersion
	}
	req.Header.Set("anthropic-version", version)
	if beta := c.header.Values("anthropic-beta"); len(beta) > 0 {
		req.Header["Anthropic-Beta"] = beta
	}
	if c.stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	return req, nil
}

func (anthropicProvider) events(_ *call, body io.ReadCloser) eventSource {
	return &anthropicEvents{s: sse.NewSplitter(body), body: body}
}

func (anthropicProvider) message(_ *call, body []byte) ([]byte, error) {
	var m struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if m.Type != "message" {
		return nil, fmt.Errorf("%w: type %q, want message", errMalformed, m.Type)
	}
	return body, nil
}

// anthropicEvents reads an Anthropic stream as it came, event by event,
// undecoded; the first event with data must be JSON, so an answer that is
// not a stream at all is caught before the caller sees it. Comments before
// it are dropped; after it every event passes.
type anthropicEvents struct {
	s       *sse.Splitter
	body    io.ReadCloser
	started bool
}

func (a *anthropicEvents) next() (sse.Raw, error) {
	for {
		ev, err := a.s.Next()
		if err != nil || a.started {
			return ev, err
		}
		data := ev.Data()
		if len(data) == 0 {
			continue
		}
		a.started = true
		if !json.Valid(data) {
			return ev, fmt.Errorf("%w: first event %q is not JSON", errMalformed, ev.Name)
		}
		return ev, nil
	}
}

func (a *anthropicEvents) buffered() bool { return a.s.Buffered() }

func (a *anthropicEvents) close() { a.body.Close() }
