package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// TokenCountHeader says how the input_tokens of a count_tokens answer were
// counted: TokenCountExact (by the Anthropic upstream) or TokenCountEstimated
// (by the gateway, four characters a token, for an OpenAI-compatible
// upstream, which has no such endpoint).
const (
	TokenCountHeader    = "ballet-token-count"
	TokenCountExact     = "exact"
	TokenCountEstimated = "estimated"
)

// countTokensProvider passes POST /v1/messages/count_tokens through to an
// Anthropic upstream.
type countTokensProvider struct{ anthropicProvider }

func (countTokensProvider) request(ctx context.Context, c *call) (*http.Request, error) {
	return anthropicRequest(ctx, c, "/v1/messages/count_tokens")
}

func (countTokensProvider) message(_ *call, body []byte) ([]byte, error) {
	var r struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if r.InputTokens == nil || *r.InputTokens < 0 {
		return nil, fmt.Errorf("%w: no input_tokens", errMalformed)
	}
	return tokenCountJSON(*r.InputTokens), nil
}

func tokenCountJSON(n int64) []byte {
	return []byte(`{"input_tokens":` + strconv.FormatInt(n, 10) + `}`)
}

// serveCountTokens answers POST /v1/messages/count_tokens with
// {"input_tokens": N}. It is authorised and routed like POST /v1/messages
// (same token, same credential choice) but costs nothing: no limit is
// taken, no usage row written, and it is counted in
// ballet_llm_count_tokens_total rather than the requests and tokens.
func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	org, project := "", ""
	status, count := http.StatusOK, ""
	defer func() { s.metrics.countTokens.WithLabelValues(org, project, count, strconv.Itoa(status)).Inc() }()
	fail := func(ref *refusal) {
		status = ref.status
		anthropicForm.write(w, ref)
	}
	p, ref := s.authorize(r)
	if ref != nil {
		fail(ref)
		return
	}
	raw, ref := s.readBody(w, r)
	if ref != nil {
		fail(ref)
		return
	}
	// Read as strictly as a Messages call: the model picks the credential
	// and the upstream gets raw as it is.
	head, err := readRequestHead(raw)
	if err != nil {
		fail(refuse(http.StatusBadRequest, llm.ErrInvalidRequest, err.Error()))
		return
	}
	if err := validateModel(head.Model); err != nil {
		fail(refuse(http.StatusBadRequest, llm.ErrInvalidRequest, err.Error()))
		return
	}
	if !head.Messages {
		fail(refuse(http.StatusBadRequest, llm.ErrInvalidRequest, "messages: field required (an array)"))
		return
	}
	sc, ref := s.scopeOf(ctx, p)
	if ref != nil {
		fail(ref)
		return
	}
	org, project = sc.OrganizationKey, sc.ProjectKey
	cred, ref := s.chooseCredential(ctx, sc, head.Model)
	if ref == nil {
		ref = s.checkUpstream(ctx, sc, cred)
	}
	if ref != nil {
		fail(ref)
		return
	}
	if cred.provider != store.ProviderAnthropic {
		count = TokenCountEstimated
		w.Header().Set(TokenCountHeader, count)
		writeJSON(w, tokenCountJSON(int64(estimateTokens(len(raw)))))
		return
	}
	c := &call{raw: raw, header: r.Header, model: head.Model, provider: cred.provider, baseURL: cred.baseURL, apiKey: cred.apiKey}
	ans, err := s.send(ctx, countTokensProvider{}, c)
	var ge *gatewayError
	switch {
	case err != nil && ctx.Err() != nil:
		status = statusClientClosed
	case errors.As(err, &ge):
		fail(refuse(ge.status, ge.typ, ge.Error()))
	case err != nil:
		fail(refuse(http.StatusBadGateway, llm.ErrAPI, "gateway: "+err.Error()))
	case ans.status != 0:
		status = ans.status
		if ans.retryAfter != "" {
			w.Header().Set("Retry-After", ans.retryAfter)
		}
		writeErrorBody(w, ans.status, ans.errBody)
	default:
		count = TokenCountExact
		w.Header().Set(TokenCountHeader, count)
		writeJSON(w, ans.body)
	}
}

// writeJSON answers 200 with a JSON body.
func writeJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body) //nolint:errcheck // the caller may be gone
}
