package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/store"
)

// refusal is an answer the gateway gives itself instead of calling upstream.
type refusal struct {
	status int
	typ    string // an Anthropic error type (llm.Err…), in both forms
	msg    string
	// code is the OpenAI form's error.code ("" for null).
	code string
	// retryAfter is sent as Retry-After, in seconds, when positive.
	retryAfter int
}

func refuse(status int, typ, msg string) *refusal {
	return &refusal{status: status, typ: typ, msg: msg}
}

// errorForm is the error body of one API: the Anthropic form on the
// Messages and Models routes, the OpenAI form on /v1/embeddings, whose
// callers are OpenAI clients. Both carry the same error types and messages.
type errorForm int

const (
	anthropicForm errorForm = iota
	openaiForm
)

func (f errorForm) write(w http.ResponseWriter, r *refusal) {
	if r.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(r.retryAfter))
	}
	if f == openaiForm {
		writeErrorBody(w, r.status, openaiErrorJSON(r.typ, r.code, r.msg))
		return
	}
	writeError(w, r.status, r.typ, r.msg)
}

// openaiErrorJSON is {"error":{"message","type","code"}}, the body OpenAI
// clients read; code is null when "".
func openaiErrorJSON(typ, code, msg string) []byte {
	var c *string
	if code != "" {
		c = &code
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": c}})
	return b
}

// requestID is the id the Handler gave the call: the request-id header of
// its answer, which the handlers read from w rather than from a context
// value, so that the request is not copied to carry it.
func requestID(w http.ResponseWriter) string {
	if v := w.Header()["Request-Id"]; len(v) == 1 {
		return v[0]
	}
	return newRequestID()
}

// callerRequestID is the caller's request id: its X-Request-Id header (the
// api request a turn's call comes from), when well formed
// (requestid.Valid); another value is dropped and "" returned.
func callerRequestID(h http.Header) string {
	id := h.Get(requestid.Header)
	if !requestid.Valid(id) {
		return ""
	}
	return id
}

// authorize reads and checks the gateway token of a call: every route needs
// one with the llm.invoke capability.
func (s *Server) authorize(r *http.Request) (llm.Principal, *refusal) {
	token := bearer(r.Header.Get("Authorization"), r.Header.Get("x-api-key"))
	if token == "" {
		return llm.Principal{}, refuse(http.StatusUnauthorized, llm.ErrAuthentication,
			"missing gateway token: send it as Authorization: Bearer <token> or x-api-key")
	}
	p, err := s.tokens.verify(s.keyring, token)
	if err != nil {
		return llm.Principal{}, refuse(http.StatusUnauthorized, llm.ErrAuthentication, err.Error())
	}
	if !p.Can(llm.CapabilityInvoke) {
		return llm.Principal{}, refuse(http.StatusForbidden, llm.ErrPermission, "the token lacks the llm.invoke capability")
	}
	return p, nil
}

// readBody reads a request body up to gateway.max_request_bytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *refusal) {
	raw, err := readAllSized(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes), r.ContentLength, s.cfg.MaxRequestBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, refuse(http.StatusRequestEntityTooLarge, llm.ErrTooLarge, "request body over "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
		}
		return nil, refuse(http.StatusBadRequest, llm.ErrInvalidRequest, "read body: "+err.Error())
	}
	return raw, nil
}

// readAllSized is io.ReadAll into a buffer of the declared length (a
// request's Content-Length, -1 when unknown) when it is at most limit: one
// allocation of the body's size instead of ReadAll's doubling from 512
// bytes. A body of another length still reads whole, and the read goes on
// to the body's end (net/http watches for the caller leaving from there).
func readAllSized(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(r)
	}
	buf := make([]byte, declared)
	for n := 0; n < len(buf); {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF { // a reader ends with io.EOF itself, never wrapped
			return buf[:n], nil // shorter than declared
		}
		if err != nil {
			return nil, err
		}
	}
	var one [1]byte
	for {
		n, err := r.Read(one[:])
		switch {
		case n > 0: // longer than declared
			rest, err := io.ReadAll(r)
			return append(append(buf, one[0]), rest...), err
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// scopeOf resolves the scope of a principal: its project, or its
// organization for an organization token.
func (s *Server) scopeOf(ctx context.Context, p llm.Principal) (*scope, *refusal) {
	sc, err := s.scopes.get(ctx, p.Organization, p.Project)
	if err == nil {
		return sc, nil
	}
	if store.IsCode(err, store.CodeNotFound) {
		return nil, refuse(http.StatusForbidden, llm.ErrPermission, "the token's organization or project does not exist")
	}
	if store.ErrorCode(err) == store.CodeUnavailable {
		s.log.WarnContext(ctx, "call refused: postgres unavailable", slog.Any("error", err))
		secs := int(store.UnavailableRetryAfter.Seconds())
		return nil, &refusal{status: http.StatusServiceUnavailable, typ: llm.ErrOverloaded, retryAfter: secs,
			msg: "gateway: the database is unavailable; retry in " + strconv.Itoa(secs) + " seconds"}
	}
	s.log.ErrorContext(ctx, "resolve scope", slog.Any("error", err))
	return nil, refuse(http.StatusInternalServerError, llm.ErrAPI, "gateway: cannot load the project's settings")
}

// chooseCredential picks the credential of a Messages call for model (see
// scope.credential), else the fallback upstream; the provider's default URL
// fills an empty base_url.
func (s *Server) chooseCredential(ctx context.Context, sc *scope, model string) (upstreamCred, *refusal) {
	if ref := sc.allowModel(model); ref != nil {
		return upstreamCred{}, ref
	}
	cred, ok := sc.credential(model)
	if !ok {
		switch {
		case s.fallbackURL != "":
			if !slices.Contains(s.cfg.FakeModels, model) {
				return cred, refuse(http.StatusNotFound, llm.ErrNotFound, "model: "+strconv.Quote(model)+
					" is not a model of the demo's fake (gateway.fake_models: "+strings.Join(s.cfg.FakeModels, ", ")+")")
			}
			cred = upstreamCred{provider: store.ProviderAnthropic, apiKey: "fake", baseURL: s.fallbackURL}
		case sc.openErr != nil:
			return cred, s.openFailed(ctx, sc)
		default:
			return cred, refuse(http.StatusForbidden, llm.ErrPermission, "no provider credential for "+sc.name()+" or its organization "+sc.OrganizationKey)
		}
	}
	return s.withDefaultURL(cred), nil
}

func (s *Server) openFailed(ctx context.Context, sc *scope) *refusal {
	s.log.ErrorContext(ctx, "open credential", slog.String("scope", sc.name()), slog.Any("error", sc.openErr))
	return refuse(http.StatusInternalServerError, llm.ErrAPI, "gateway: the "+sc.name()+" credential cannot be opened with the gateway's credentials key")
}

func (s *Server) withDefaultURL(cred upstreamCred) upstreamCred {
	if cred.baseURL == "" {
		cred.baseURL = s.cfg.AnthropicURL
		if cred.provider == store.ProviderOpenAI {
			cred.baseURL = s.cfg.OpenAIURL
		}
	}
	return cred
}

// checkUpstream refuses a credential whose base_url the operator did not
// allow: the key goes nowhere else.
func (s *Server) checkUpstream(ctx context.Context, sc *scope, cred upstreamCred) *refusal {
	if err := s.upstreams.Check(cred.baseURL); err != nil {
		s.log.WarnContext(ctx, "credential base_url refused", slog.String("scope", sc.name()),
			slog.String("provider", cred.provider), slog.Any("error", err))
		return refuse(http.StatusForbidden, llm.ErrPermission, "the "+cred.provider+" credential of "+sc.name()+
			" has a base_url that is not allowed: "+UpstreamRule)
	}
	return nil
}
