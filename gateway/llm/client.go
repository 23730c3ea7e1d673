package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/internal/tracing"
)

// eventOptions decode a stream event as leniently as encoding/json did.
var eventOptions = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// Client calls the gateway for workers: it sends a token per principal
// (minted again once half of its lifetime is gone) and reads streamed
// answers as typed events. Cancelling the ctx of a call closes its
// HTTP request at once, and the gateway closes the upstream call in turn.
type Client struct {
	url  string
	key  []byte
	ttl  time.Duration
	http *http.Client
	// tools is the encoding of the tools last sent (encode.go).
	tools toolsCache
	// tokens are the tokens minted, per principal (client_tokens.go).
	tokens clientTokens
}

// NewClient returns a client for the gateway at url (gateway.url) that signs
// its tokens with signingKey. hc may be nil.
func NewClient(url string, signingKey []byte, hc *http.Client) *Client {
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		// A connection per running turn, held for the whole model call: small
		// buffers (4 KiB each by default). A streamed answer is read through
		// the SSE reader's own buffer, and a request body is written past the
		// write buffer (sentBody), so neither slows a call down.
		tr.ReadBufferSize, tr.WriteBufferSize = connReadBuffer, connWriteBuffer
		hc = &http.Client{Transport: tr}
	}
	return &Client{url: strings.TrimRight(url, "/"), key: signingKey, ttl: 5 * time.Minute, http: hc}
}

// Token is a gateway token for p, as the client's calls send: minted for
// the client's token lifetime, and the same token again while at least
// half of that is left.
func (c *Client) Token(p Principal) (string, error) { return c.tokens.token(c.key, p, c.ttl) }

func (c *Client) post(ctx context.Context, p Principal, req MessageRequest) (*http.Response, error) {
	return c.postEncoded(ctx, p, "/v1/messages", func() ([]byte, error) { return c.encodeRequest(&req) })
}

// encodeRequest encodes a model request into a pooled buffer (sentBody
// gives it back once written).
func (c *Client) encodeRequest(req *MessageRequest) ([]byte, error) {
	var tools []byte
	if len(req.Tools) > 0 {
		var err error
		if tools, err = c.tools.encode(req.Tools); err != nil {
			return nil, err
		}
	}
	return appendRequest(getBodyBuf(), req, tools)
}

// postJSON sends body to the gateway's path with a token minted for p, and
// the request id ctx carries (requestid.With) as X-Request-Id; an answer
// other than 200 is returned as an *APIError.
func (c *Client) postJSON(ctx context.Context, p Principal, path string, body any) (*http.Response, error) {
	return c.postEncoded(ctx, p, path, func() ([]byte, error) { return json.Marshal(body) })
}

// postEncoded is postJSON with the body's encoding: called once, and again
// only to resend a request that never reached the gateway.
func (c *Client) postEncoded(ctx context.Context, p Principal, path string, encode func() ([]byte, error)) (*http.Response, error) {
	token, err := c.Token(p)
	if err != nil {
		return nil, err
	}
	b, err := encode()
	if err != nil {
		return nil, fmt.Errorf("gateway: encode request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+path, newSentBody(b))
	if err != nil {
		return nil, fmt.Errorf("gateway: request: %w", err)
	}
	hr.ContentLength = int64(len(b))
	// The transport asks for the body again only to resend a request that
	// never reached the gateway; then it is encoded anew.
	hr.GetBody = func() (io.ReadCloser, error) {
		b, err := encode()
		if err != nil {
			return nil, fmt.Errorf("gateway: encode request: %w", err)
		}
		return newSentBody(b), nil
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+token)
	hr.Header.Set("anthropic-version", AnthropicVersion)
	if id := requestid.From(ctx); id != "" {
		hr.Header.Set(requestid.Header, id)
	}
	// The caller's trace goes on in the gateway (traceparent, tracestate).
	tracing.InjectHeaders(ctx, hr.Header)
	resp, err := c.http.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("gateway: call: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// readAPIError reads an error answer: the Anthropic form
// {"type":"error","error":{"type","message"}} or the OpenAI form
// {"error":{"message","type","code"}} of the embeddings route.
func readAPIError(resp *http.Response) *APIError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &APIError{Status: resp.StatusCode, Type: ErrorTypeForStatus(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	var eb ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Type != "" {
		e.Type, e.Message = eb.Error.Type, eb.Error.Message
	}
	e.RetryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	return e
}

// Create makes a non-streamed call.
func (c *Client) Create(ctx context.Context, p Principal, req MessageRequest) (*MessageResponse, error) {
	req.Stream = false
	resp, err := c.post(ctx, p, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var msg MessageResponse
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		return nil, fmt.Errorf("gateway: decode answer: %w", err)
	}
	return &msg, nil
}

// Stream makes a streamed call. Read it with Next and Event; Message holds
// the answer assembled so far. Close it when done.
func (c *Client) Stream(ctx context.Context, p Principal, req MessageRequest) (*Stream, error) {
	req.Stream = true
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.post(ctx, p, req)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream{ctx: ctx, body: resp.Body, r: sse.NewReader(resp.Body), cancel: cancel,
		msg: MessageResponse{Content: Content{}}, partial: map[int]*strings.Builder{}}, nil
}

// EventType is the kind of a stream event.
type EventType string

// Stream event types.
const (
	// EventStart opens the answer: the message id, model and input usage.
	EventStart EventType = "start"
	// EventText is a piece of text of block Index.
	EventText EventType = "text"
	// EventToolUse is a complete tool_use block, input parsed.
	EventToolUse EventType = "tool_use"
	// EventStop ends the answer: stop reason and final usage.
	EventStop EventType = "stop"
)

// Event is one parsed stream event.
type Event struct {
	Type       EventType
	Index      int
	Text       string
	Block      *ContentBlock
	StopReason string
	Usage      Usage
}

// Stream is a streamed answer being read.
type Stream struct {
	ctx     context.Context
	body    io.ReadCloser
	r       *sse.Reader
	cancel  context.CancelFunc
	msg     MessageResponse
	partial map[int]*strings.Builder
	ev      Event
	err     error
	done    bool
}

// Next reads up to the next event worth reporting; false at the end or on
// an error (see Err).
func (s *Stream) Next() bool {
	for !s.done {
		raw, err := s.r.Next()
		if err != nil {
			s.fail(err)
			return false
		}
		if ev, ok := s.apply(raw); ok {
			s.ev = ev
			return true
		}
	}
	return false
}

func (s *Stream) fail(err error) {
	s.done = true
	switch {
	case s.ctx.Err() != nil:
		s.err = s.ctx.Err()
	case errors.Is(err, io.EOF):
		s.err = fmt.Errorf("gateway: stream ended before message_stop: %w", io.ErrUnexpectedEOF)
	default:
		s.err = fmt.Errorf("gateway: read stream: %w", err)
	}
}

type wireEvent struct {
	Type         string           `json:"type"`
	Index        int              `json:"index"`
	Message      *MessageResponse `json:"message"`
	ContentBlock *ContentBlock    `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *UsageDelta  `json:"usage"`
	Error *ErrorDetail `json:"error"`
}

func (s *Stream) apply(raw sse.Event) (Event, bool) {
	var e wireEvent
	if err := jsonv2.Unmarshal(raw.Data, &e, eventOptions); err != nil {
		s.done, s.err = true, fmt.Errorf("gateway: stream event %q: %w", raw.Name, err)
		return Event{}, false
	}
	switch e.Type {
	case "message_start":
		if e.Message != nil {
			s.msg = *e.Message
			if s.msg.Content == nil {
				s.msg.Content = Content{}
			}
		}
		return Event{Type: EventStart, Usage: s.msg.Usage}, true
	case "content_block_start":
		if e.ContentBlock == nil {
			return Event{}, false
		}
		for len(s.msg.Content) <= e.Index {
			s.msg.Content = append(s.msg.Content, ContentBlock{})
		}
		b := *e.ContentBlock
		if b.Type == BlockToolUse {
			b.Input = nil
			s.partial[e.Index] = &strings.Builder{}
		}
		s.msg.Content[e.Index] = b
	case "content_block_delta":
		if e.Index >= len(s.msg.Content) {
			return Event{}, false
		}
		b := &s.msg.Content[e.Index]
		switch e.Delta.Type {
		case "text_delta":
			b.Text += e.Delta.Text
			return Event{Type: EventText, Index: e.Index, Text: e.Delta.Text}, true
		case "input_json_delta":
			if p := s.partial[e.Index]; p != nil {
				p.WriteString(e.Delta.PartialJSON)
			}
		case "thinking_delta":
			b.Thinking += e.Delta.Thinking
		case "signature_delta":
			b.Signature += e.Delta.Signature
		}
	case "content_block_stop":
		if e.Index >= len(s.msg.Content) {
			return Event{}, false
		}
		b := &s.msg.Content[e.Index]
		if b.Type != BlockToolUse {
			return Event{}, false
		}
		b.Input = json.RawMessage(`{}`)
		if p := s.partial[e.Index]; p != nil && strings.TrimSpace(p.String()) != "" {
			b.Input = ToolInput(p.String())
		}
		blk := *b
		return Event{Type: EventToolUse, Index: e.Index, Block: &blk}, true
	case "message_delta":
		if e.Delta.StopReason != "" {
			s.msg.StopReason = e.Delta.StopReason
		}
		e.Usage.ApplyTo(&s.msg.Usage)
	case "message_stop":
		s.done = true
		return Event{Type: EventStop, StopReason: s.msg.StopReason, Usage: s.msg.Usage}, true
	case "error":
		s.done = true
		ae := &APIError{Type: ErrAPI, Message: string(raw.Data)}
		if e.Error != nil {
			ae.Type, ae.Message = e.Error.Type, e.Error.Message
		}
		s.err = ae
	}
	return Event{}, false
}

// Event is the event Next stopped at.
func (s *Stream) Event() Event { return s.ev }

// Err is why the stream ended early: nil after message_stop, an *APIError
// for an error event, the ctx's error when cancelled.
func (s *Stream) Err() error { return s.err }

// Message is the answer assembled so far (all of it after EventStop).
func (s *Stream) Message() *MessageResponse { return &s.msg }

// Close ends the call, closing the connection if the answer is unfinished.
func (s *Stream) Close() error {
	s.cancel()
	return s.body.Close()
}

// Collect reads a stream to its end, calling onText for each text piece,
// and returns the complete answer.
func (s *Stream) Collect(onText func(string)) (*MessageResponse, error) {
	defer s.Close()
	for s.Next() {
		if ev := s.Event(); ev.Type == EventText && onText != nil {
			onText(ev.Text)
		}
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.Message(), nil
}
