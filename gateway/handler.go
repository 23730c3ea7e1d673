package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
)

// statusClientClosed is recorded when the caller went away mid-call.
const statusClientClosed = 499

// messageCall is one admitted POST /v1/messages: who calls, for which
// scope, with which reservation, and the call on its way upstream.
type messageCall struct {
	call
	meter meter
	p     llm.Principal
	sc    *scope
	res   *reservation
	reqID string
	start time.Time
}

// serveMessages admits a call, answers it and settles it. The three steps
// are apart so that the relay, deep in net/http's writes, runs from a
// shallow stack: the handler's goroutine keeps a stack size it does not
// grow again on every call.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	r, span := startMessages(r)
	mc := s.admitMessage(w, r)
	if mc == nil {
		endMessages(span, nil, 0)
		return
	}
	status, answered := s.answerMessage(r.Context(), w, mc)
	s.settleMessage(r.Context(), mc, status, answered)
	endMessages(span, mc, status)
}

// settleMessage finishes an answered or failed call with its metered usage.
func (s *Server) settleMessage(ctx context.Context, mc *messageCall, status int, answered bool) {
	ctx, span := tracing.StartSpan(ctx, tracer, "gateway.meter", trace.SpanKindInternal)
	defer span.End()
	var u llm.Usage
	estimated := false
	if answered {
		u, estimated = mc.meter.final(len(mc.raw))
	}
	s.finish(ctx, mc.p, mc.sc, &mc.call, mc.res, mc.reqID, status, u, estimated, time.Since(mc.start))
}

// admitMessage authenticates, reads and checks a Messages request, and
// reserves its tokens; it answers a refused call itself and returns nil.
func (s *Server) admitMessage(w http.ResponseWriter, r *http.Request) *messageCall {
	start := time.Now()
	ctx := r.Context()
	p, ref := s.authorize(r)
	if ref != nil {
		anthropicForm.write(w, ref)
		return nil
	}
	raw, ref := s.readBody(w, r)
	if ref != nil {
		anthropicForm.write(w, ref)
		return nil
	}
	// Read strictly, so that the upstream, which gets raw as it is, reads
	// the model, max_tokens and stream the call is admitted on.
	head, err := readRequestHead(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, llm.ErrInvalidRequest, err.Error())
		return nil
	}
	if err := validateModel(head.Model); err != nil {
		writeError(w, http.StatusBadRequest, llm.ErrInvalidRequest, err.Error())
		return nil
	}
	if head.MaxTokens < 1 {
		writeError(w, http.StatusBadRequest, llm.ErrInvalidRequest, "max_tokens: must be at least 1")
		return nil
	}
	sc, ref := s.scopeOf(ctx, p)
	if ref != nil {
		anthropicForm.write(w, ref)
		return nil
	}
	cred, ref := s.chooseCredential(ctx, sc, head.Model)
	if ref != nil {
		anthropicForm.write(w, ref)
		return nil
	}
	if ref := s.checkUpstream(ctx, sc, cred); ref != nil {
		anthropicForm.write(w, ref)
		s.metrics.observe(sc.OrganizationKey, sc.ProjectKey, head.Model, ref.status, llm.Usage{})
		return nil
	}
	// The reservation covers all the call may use: its input, bounded by
	// the body's size, must fit in what remains of a budget; its output,
	// max_tokens at most, may pass it. The call settles on its usage.
	input := inputTokenBound(len(raw))
	rctx, span := tracing.StartSpan(ctx, tracer, "gateway.reserve", trace.SpanKindInternal)
	res, ref := s.limiter.reserve(rctx, sc, head.Model, input, head.MaxTokens, true)
	if span.IsRecording() && ref != nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(ref.status))
	}
	span.End()
	if ref != nil {
		anthropicForm.write(w, ref)
		if ref.status != http.StatusServiceUnavailable {
			s.metrics.observe(sc.OrganizationKey, sc.ProjectKey, head.Model, ref.status, llm.Usage{})
		}
		return nil
	}
	return &messageCall{
		call: call{raw: raw, header: r.Header, model: head.Model, stream: head.Stream, maxTokens: head.MaxTokens,
			provider: cred.provider, baseURL: cred.baseURL, apiKey: cred.apiKey},
		p: p, sc: sc, res: res, reqID: requestID(w), start: start,
	}
}

// answerMessage sends an admitted call upstream and answers the caller:
// the status recorded and whether an answer came to meter.
func (s *Server) answerMessage(ctx context.Context, w http.ResponseWriter, mc *messageCall) (status int, answered bool) {
	ans, err := s.send(ctx, s.providers[mc.provider], &mc.call)
	switch {
	case err != nil:
		var ge *gatewayError
		switch {
		case ctx.Err() != nil:
			return statusClientClosed, false
		case errors.As(err, &ge):
			writeError(w, ge.status, ge.typ, ge.Error())
			return ge.status, false
		default:
			writeError(w, http.StatusBadGateway, llm.ErrAPI, "gateway: "+err.Error())
			return http.StatusBadGateway, false
		}
	case ans.status != 0:
		if ans.retryAfter != "" {
			w.Header().Set("Retry-After", ans.retryAfter)
		}
		writeErrorBody(w, ans.status, ans.errBody)
		return ans.status, false
	case ans.src != nil:
		// Without limits to settle in Redis the call ends at once after the
		// relay: its last events may go out with the end of the answer.
		rctx, span := tracing.StartSpan(ctx, tracer, "gateway.relay", trace.SpanKindInternal)
		status := s.relay(rctx, w, mc.provider, ans, &mc.meter, !mc.res.charged())
		span.End()
		return status, true
	default:
		mc.meter.observeMessage(ans.body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(ans.body); err != nil {
			return statusClientClosed, true
		}
		return http.StatusOK, true
	}
}

// finish settles the reservation, counts the call and queues its usage row.
func (s *Server) finish(ctx context.Context, p llm.Principal, sc *scope, c *call, res *reservation, reqID string, status int, u llm.Usage, estimated bool, took time.Duration) {
	cost := s.costOf(c.model, u)
	if res.charged() { // limits are set: settle them in Redis
		var spent int64
		if cost != nil {
			spent = *cost
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err := s.limiter.settle(sctx, res, u.Total(), spent)
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "settle reservation", slog.String("scope", sc.name()), slog.Any("error", err))
		}
	}
	s.metrics.observe(sc.OrganizationKey, sc.ProjectKey, c.model, status, u)
	s.usage.add(store.Usage{
		RequestID: reqID, OrganizationID: sc.OrganizationID, ProjectID: sc.ProjectID, SessionID: sessionUUID(p.Session),
		Caller: p.Subject, ActingFor: p.ActingFor, Provider: c.provider, Model: c.model, Status: status,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens,
		Estimated: estimated, DurationMS: int(took.Milliseconds()), CreatedAt: time.Now(),
		CostMicroUSD: cost,
	})
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("request_id", reqID)}
	if id := callerRequestID(c.header); id != "" {
		attrs = append(attrs, slog.String("caller_request_id", id))
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "llm call", append(attrs, slog.String("caller", p.Subject),
		slog.String("model", c.model), slog.Int("status", status), slog.Int64("input_tokens", u.InputTokens),
		slog.Int64("output_tokens", u.OutputTokens), slog.Bool("estimated", estimated), slog.Duration("took", took))...)
}

// sessionUUID keeps a session id only when it is a UUID (the usage column's type).
func sessionUUID(s string) string {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return ""
	}
	for i, r := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return ""
		}
	}
	return s
}

// bearer extracts the token from Authorization: Bearer or x-api-key.
func bearer(authorization, apiKey string) string {
	if v, ok := strings.CutPrefix(authorization, "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	if v, ok := strings.CutPrefix(authorization, "bearer "); ok {
		return strings.TrimSpace(v)
	}
	return strings.TrimSpace(apiKey)
}
