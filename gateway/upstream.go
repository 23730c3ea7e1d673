package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sethvargo/go-retry"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/tracing"
)

// call is one model call on its way upstream.
type call struct {
	raw       []byte // the body as the caller sent it
	header    http.Header
	model     string
	stream    bool
	maxTokens int64 // the max_tokens read and admitted (Messages calls)
	provider  string
	baseURL   string
	apiKey    string
	openaiReq []byte // the translated body, for openai
}

// eventSource yields the Anthropic events of a streamed answer, framed.
type eventSource interface {
	next() (sse.Raw, error) // io.EOF at the clean end
	// buffered reports whether next returns without waiting for the
	// upstream: the relay flushes when it does not.
	buffered() bool
	// ended reports whether the upstream's answer has ended, all of it
	// read (false when that is not known).
	ended() bool
	close()
}

// provider speaks one upstream API behind the Anthropic Messages API.
type provider interface {
	// prepare translates the call's body once, before the first attempt.
	prepare(c *call) error
	// request builds the HTTP request of one attempt.
	request(ctx context.Context, c *call) (*http.Request, error)
	// events reads a 2xx streamed answer as Anthropic events.
	events(c *call, body io.ReadCloser) eventSource
	// message reads a 2xx JSON answer as an Anthropic message body;
	// an unreadable one wraps errMalformed.
	message(c *call, body []byte) ([]byte, error)
}

// answer is what the retry loop hands the relay: a stream with its first
// event read, a JSON message, or an error answer to pass to the caller.
type answer struct {
	src   eventSource
	first sse.Raw

	body []byte

	status     int // non-zero: an error answer
	errBody    []byte
	retryAfter string
}

// gatewayError is an error the gateway answers itself: with status, type
// and err's text as the message, err's chain kept.
type gatewayError struct {
	status int
	typ    string
	err    error
}

func (e *gatewayError) Error() string { return e.err.Error() }
func (e *gatewayError) Unwrap() error { return e.err }

// maxUpstreamBody caps a JSON answer or an error body read from upstream.
const maxUpstreamBody = 64 << 20

// send runs a call with retries: connection errors, 429 and 5xx are retried
// with exponential backoff and jitter, honouring Retry-After, as long as
// nothing has been sent to the caller — which is always the case here: the
// relay starts writing only after send returns. For a stream, send reads the
// first event, so an upstream that fails before it is retried too.
func (s *Server) send(ctx context.Context, p provider, c *call) (*answer, error) {
	if err := p.prepare(c); err != nil {
		return nil, err
	}
	var (
		attempt int
		asked   time.Duration // the wait the last answer asked for
		lastErr error
	)
	var backoff retry.Backoff // built at the first retry: most calls have none
	// The wait before each retry: what the upstream asked for, else the
	// backoff's next step (which advances either way, as attempts do).
	waits := retry.BackoffFunc(func() (time.Duration, bool) {
		if backoff == nil {
			backoff = s.retryBackoff()
		}
		wait := nextWait(backoff)
		if asked > 0 {
			wait = asked
		}
		s.log.DebugContext(ctx, "retrying upstream", "provider", c.provider, "attempt", attempt, "wait", wait, "error", lastErr)
		return wait, false
	})
	return retry.DoValue(ctx, waits, func(ctx context.Context) (*answer, error) {
		attempt++
		a, retryable, wait, err := s.attempt(ctx, p, c)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retryable || attempt >= s.cfg.RetryMaxAttempts || (wait > s.cfg.RetryMaxWait && s.cfg.RetryMaxWait > 0) {
			if err != nil {
				return nil, err
			}
			return a, nil
		}
		if a != nil && a.src != nil {
			a.src.close()
		}
		if err == nil {
			err = fmt.Errorf("upstream %s answered %d", c.provider, a.status)
		}
		asked, lastErr = wait, err
		s.metrics.retries.WithLabelValues(c.provider).Inc()
		return nil, retry.RetryableError(err)
	})
}

// attempt sends once; it reports whether a failure may be retried and the
// wait the upstream asked for.
func (s *Server) attempt(ctx context.Context, p provider, c *call) (a *answer, retryable bool, wait time.Duration, err error) {
	req, err := p.request(ctx, c)
	if err != nil {
		return nil, false, 0, &gatewayError{http.StatusInternalServerError, llm.ErrAPI, fmt.Errorf("gateway: build upstream request: %w", err)}
	}
	if err := s.upstreams.CheckURL(req.URL); err != nil {
		return nil, false, 0, &gatewayError{http.StatusForbidden, llm.ErrPermission, fmt.Errorf("upstream %s is not allowed: %s", c.provider, UpstreamRule)}
	}
	span := startUpstream(ctx, req, c.provider)
	defer func() {
		if span.IsRecording() && a != nil && a.status != 0 {
			span.SetAttributes(semconv.HTTPResponseStatusCode(a.status))
		}
		tracing.EndSpan(span, err)
	}()
	start := time.Now()
	resp, err := s.http.Do(req)
	if err != nil {
		s.timing().done(c.provider, start)
		return nil, true, 0, &gatewayError{http.StatusBadGateway, llm.ErrAPI, fmt.Errorf("upstream %s unreachable: %w", c.provider, err)}
	}
	if !c.stream || resp.StatusCode < 200 || resp.StatusCode > 299 {
		s.timing().firstByte(c.provider, start)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		s.timing().done(c.provider, start)
		a = &answer{status: resp.StatusCode, errBody: upstreamErrorBody(c.provider, resp.StatusCode, body), retryAfter: resp.Header.Get("Retry-After")}
		return a, retryableStatus(resp.StatusCode), retryAfter(resp.Header), nil
	}
	if c.stream {
		src := s.timing().timed(p.events(c, resp.Body), c.provider, start)
		first, err := src.next()
		s.timing().firstByte(c.provider, start)
		if err != nil {
			src.close()
			if errors.Is(err, errMalformed) {
				return nil, false, 0, &gatewayError{http.StatusBadGateway, llm.ErrAPI, fmt.Errorf("upstream %s sent a malformed stream: %w", c.provider, err)}
			}
			return nil, true, 0, &gatewayError{http.StatusBadGateway, llm.ErrAPI, fmt.Errorf("upstream %s stream ended before its first event: %w", c.provider, err)}
		}
		if first.Name == "error" {
			// An error before anything reached the caller: answer it with its
			// status, and retry it like one.
			typ, body := streamErrorBody(c.provider, first.Data())
			src.close() // first is read: close releases its bytes
			status := statusForErrorType(typ)
			return &answer{status: status, errBody: body}, retryableStatus(status), 0, nil
		}
		return &answer{src: src, first: first}, false, 0, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	resp.Body.Close()
	s.timing().done(c.provider, start)
	if err != nil {
		return nil, true, 0, &gatewayError{http.StatusBadGateway, llm.ErrAPI, fmt.Errorf("upstream %s answer cut short: %w", c.provider, err)}
	}
	msg, err := p.message(c, body)
	if err != nil {
		return nil, false, 0, &gatewayError{http.StatusBadGateway, llm.ErrAPI, fmt.Errorf("upstream %s sent a malformed answer: %w", c.provider, err)}
	}
	return &answer{body: msg}, false, 0, nil
}

func retryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// retryBackoff is the schedule of one call's retries: exponential from
// gateway.retry_initial_backoff, capped at gateway.retry_max_backoff, each
// wait drawn with equal jitter (half fixed, half random).
func (s *Server) retryBackoff() retry.Backoff {
	base := s.cfg.RetryInitialBackoff
	if base <= 0 {
		base = max(s.cfg.RetryMaxBackoff, time.Nanosecond)
	}
	capped := retry.WithCappedDuration(s.cfg.RetryMaxBackoff, retry.NewExponential(base))
	return retry.BackoffFunc(func() (time.Duration, bool) {
		d := nextWait(capped)
		half := d / 2
		return half + rand.N(half+1), false
	})
}

// nextWait is b's next wait; the schedules here never stop.
func nextWait(b retry.Backoff) time.Duration {
	d, _ := b.Next()
	return d
}

// retryAfter reads retry-after-ms or Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// newHTTPClient is the client of every upstream call: net/http's
// Transport, HTTP/2 over TLS where the upstream offers it, connections kept
// for reuse. roots, when not nil, replaces the system's certificate
// authorities (WithUpstreamRootCAs); production leaves it nil.
func newHTTPClient(cfg Config, roots *x509.CertPool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 512
	tr.ResponseHeaderTimeout = cfg.HeaderTimeout
	tr.DisableCompression = true // stream bytes as they come, never gunzip-buffer
	tr.DialContext = (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	// Never follow redirects: a credential's base_url must not lead the
	// gateway elsewhere.
	return &http.Client{Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
