package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

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
	req, err := postRequest(ctx, base, path, c.raw)
	if err != nil {
		return nil, err
	}
	// The keys are in canonical form already: set without canonicalizing.
	h := req.Header
	h["Content-Type"] = jsonContentType
	h["X-Api-Key"] = []string{c.apiKey}
	if version := c.header.Get("anthropic-version"); version != "" {
		h["Anthropic-Version"] = []string{version}
	} else {
		h["Anthropic-Version"] = defaultAnthropicVersion
	}
	if beta := c.header.Values("anthropic-beta"); len(beta) > 0 {
		h["Anthropic-Beta"] = beta
	}
	if c.stream {
		h["Accept"] = eventStream
	}
	return req, nil
}

// Header values shared by every upstream request and streamed answer
// (never modified).
var (
	jsonContentType         = []string{"application/json"}
	eventStream             = []string{"text/event-stream"} // an Accept and a Content-Type
	defaultAnthropicVersion = []string{llm.AnthropicVersion}
)

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
	stopped bool // message_stop came: only the end of the body follows
}

func (a *anthropicEvents) next() (sse.Raw, error) {
	for {
		ev, err := a.s.Next()
		if err != nil || a.started {
			a.stopped = err == nil && ev.Name == "message_stop"
			return ev, err
		}
		data := ev.Data()
		if len(data) == 0 {
			continue
		}
		a.started = true
		if !validJSON(data) {
			return ev, fmt.Errorf("%w: first event %q is not JSON", errMalformed, ev.Name)
		}
		return ev, nil
	}
}

func (a *anthropicEvents) buffered() bool { return a.s.Buffered() }

func (a *anthropicEvents) ended() bool { return a.s.Ended() }

// close ends the answer. After message_stop it first reads what is left of
// the body (the chunked encoding's end, which follows at once), for a
// little while at most, unless that end was read already, so that the
// connection goes back to the pool instead of being closed: a body closed
// before its end takes its connection with it.
func (a *anthropicEvents) close() {
	if a.stopped && !a.s.Ended() {
		drainBody(a.body)
	}
	a.s.Release()
	a.body.Close()
}

// Bounds of drainBody.
const (
	drainWait  = 20 * time.Millisecond
	drainBytes = 4 << 10
)

// drainBody reads body to its end, up to drainBytes and for up to
// drainWait; what stops it early closes the body (and its connection).
func drainBody(body io.ReadCloser) {
	t := time.AfterFunc(drainWait, func() { body.Close() })
	defer t.Stop()
	io.CopyN(io.Discard, body, drainBytes) //nolint:errcheck // an error closes the connection, as Close would
}
