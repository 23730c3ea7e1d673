package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// embeddingsBody is what the gateway reads of a POST /v1/embeddings body.
type embeddingsBody struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// upstreamEmbeddings is the body the gateway sends upstream: the caller's,
// with the input always an array of strings.
type upstreamEmbeddings struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format,omitempty"`
	Dimensions     *int     `json:"dimensions,omitempty"`
	User           string   `json:"user,omitempty"`
}

func invalidInput(msg string) *refusal {
	return &refusal{status: http.StatusBadRequest, typ: llm.ErrInvalidRequest, code: "invalid_input", msg: msg}
}

// readEmbeddings checks an embeddings body against the gateway's bounds and
// returns the texts, the upstream body and the bytes of text.
func (s *Server) readEmbeddings(raw []byte) (*upstreamEmbeddings, int, *refusal) {
	var b embeddingsBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, 0, refuse(http.StatusBadRequest, llm.ErrInvalidRequest, "body: "+err.Error())
	}
	if err := validateModel(b.Model); err != nil {
		return nil, 0, refuse(http.StatusBadRequest, llm.ErrInvalidRequest, err.Error())
	}
	texts, ref := inputTexts(b.Input)
	if ref != nil {
		return nil, 0, ref
	}
	if len(texts) > s.cfg.EmbeddingsMaxInputs {
		return nil, 0, invalidInput(fmt.Sprintf("input: at most %d texts per call (gateway.embeddings_max_inputs), got %d", s.cfg.EmbeddingsMaxInputs, len(texts)))
	}
	size := 0
	for _, t := range texts {
		size += len(t)
	}
	if size > s.cfg.EmbeddingsMaxInputBytes {
		return nil, 0, &refusal{status: http.StatusRequestEntityTooLarge, typ: llm.ErrTooLarge, code: "request_too_large",
			msg: fmt.Sprintf("input: at most %d bytes of text per call (gateway.embeddings_max_input_bytes), got %d", s.cfg.EmbeddingsMaxInputBytes, size)}
	}
	switch b.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, 0, invalidInput("encoding_format: must be float or base64, got " + strconv.Quote(truncate(b.EncodingFormat, 40)))
	}
	if b.Dimensions != nil && *b.Dimensions < 1 {
		return nil, 0, invalidInput("dimensions: must be at least 1")
	}
	return &upstreamEmbeddings{Model: b.Model, Input: texts, EncodingFormat: b.EncodingFormat, Dimensions: b.Dimensions, User: b.User}, size, nil
}

// inputTexts reads input: a string or an array of strings. Arrays of token
// ids are refused: the gateway meters and routes text only.
func inputTexts(raw json.RawMessage) ([]string, *refusal) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalidInput("input: field required (a string or an array of strings)")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, invalidInput("input: must not be empty")
		}
		return []string{one}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, invalidInput("input: must be a string or an array of strings")
	}
	if len(items) == 0 {
		return nil, invalidInput("input: must not be an empty array")
	}
	texts := make([]string, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) > 0 && (it[0] == '[' || it[0] == '-' || (it[0] >= '0' && it[0] <= '9')) {
			return nil, &refusal{status: http.StatusBadRequest, typ: llm.ErrInvalidRequest, code: "unsupported_input",
				msg: "input: arrays of token ids are not supported; send the texts as strings"}
		}
		if json.Unmarshal(it, &texts[i]) != nil {
			return nil, invalidInput(fmt.Sprintf("input.%d: must be a string", i))
		}
		if texts[i] == "" {
			return nil, invalidInput(fmt.Sprintf("input.%d: must not be empty", i))
		}
	}
	return texts, nil
}

// embeddingsCredential picks the upstream of an embeddings call: the
// scope's OpenAI-compatible credential (the project's override first), else
// the fake fallback, which speaks the OpenAI embeddings API too.
func (s *Server) embeddingsCredential(sc *scope) (upstreamCred, *refusal) {
	if cred, ok := sc.credentialOf(store.ProviderOpenAI); ok {
		return s.withDefaultURL(cred), nil
	}
	if s.fallbackURL != "" {
		return upstreamCred{provider: store.ProviderOpenAI, apiKey: "fake", baseURL: s.fallbackURL + "/v1"}, nil
	}
	msg := "no openai credential for " + sc.name() + " or its organization " + sc.OrganizationKey +
		": embeddings are served by an OpenAI-compatible upstream (OpenAI, Ollama, vLLM)"
	if sc.openErr != nil {
		msg += "; a credential of the scope cannot be opened with the gateway's credentials key"
	}
	return upstreamCred{}, &refusal{status: http.StatusForbidden, typ: llm.ErrPermission, code: "no_credential", msg: msg}
}

// serveEmbeddings answers POST /v1/embeddings in the OpenAI form, errors
// included ({"error":{"message","type","code"}}, the types and messages
// those of /v1/messages). The call is metered like a Messages call: input
// tokens (the upstream's prompt_tokens, else the estimate, marked
// estimated), a usage row, budgets and rate limits.
func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	p, ref := s.authorize(r)
	if ref != nil {
		openaiForm.write(w, ref)
		return
	}
	raw, ref := s.readBody(w, r)
	if ref != nil {
		openaiForm.write(w, ref)
		return
	}
	req, size, ref := s.readEmbeddings(raw)
	if ref != nil {
		openaiForm.write(w, ref)
		return
	}
	sc, ref := s.scopeOf(ctx, p)
	if ref != nil {
		openaiForm.write(w, ref)
		return
	}
	ref = sc.allowModel(req.Model)
	var cred upstreamCred
	if ref == nil {
		cred, ref = s.embeddingsCredential(sc)
	}
	if ref == nil {
		ref = s.checkUpstream(ctx, sc, cred)
	}
	if ref != nil {
		openaiForm.write(w, ref)
		s.metrics.observe(sc.OrganizationKey, sc.ProjectKey, req.Model, ref.status, llm.Usage{})
		return
	}
	estimate := int64(estimateTokens(size))
	// The estimate is no bound: the call is let in while anything of a
	// budget remains, and settles on its usage.
	res, ref := s.limiter.reserve(ctx, sc, req.Model, estimate, 0, false)
	if ref != nil {
		openaiForm.write(w, ref)
		if ref.status != http.StatusServiceUnavailable {
			s.metrics.observe(sc.OrganizationKey, sc.ProjectKey, req.Model, ref.status, llm.Usage{})
		}
		return
	}
	body, err := json.Marshal(req)
	if err != nil {
		s.limiter.settle(ctx, res, 0, 0) //nolint:errcheck
		openaiForm.write(w, refuse(http.StatusInternalServerError, llm.ErrAPI, "gateway: encode request: "+err.Error()))
		return
	}
	c := &call{raw: body, header: r.Header, model: req.Model, provider: cred.provider, baseURL: cred.baseURL, apiKey: cred.apiKey}
	out := &embeddingsResult{}
	status := http.StatusOK
	var u llm.Usage
	estimated := false
	ans, err := s.send(ctx, embeddingsProvider{want: len(req.Input), model: req.Model, out: out}, c)
	var ge *gatewayError
	switch {
	case err != nil && ctx.Err() != nil:
		status = statusClientClosed
	case errors.As(err, &ge):
		status = ge.status
		openaiForm.write(w, &refusal{status: ge.status, typ: ge.typ, msg: ge.Error()})
	case err != nil:
		status = http.StatusBadGateway
		openaiForm.write(w, refuse(status, llm.ErrAPI, "gateway: "+err.Error()))
	case ans.status != 0:
		status = ans.status
		if ans.retryAfter != "" {
			w.Header().Set("Retry-After", ans.retryAfter)
		}
		var eb llm.ErrorBody
		json.Unmarshal(ans.errBody, &eb) //nolint:errcheck // the gateway's own errorJSON
		writeErrorBody(w, status, openaiErrorJSON(eb.Error.Type, "", eb.Error.Message))
	default:
		u.InputTokens, estimated = out.promptTokens, out.promptTokens <= 0
		if estimated {
			u.InputTokens = estimate
		}
		b, err := out.encode(u.InputTokens)
		if err != nil {
			status = http.StatusBadGateway
			openaiForm.write(w, refuse(status, llm.ErrAPI, "gateway: encode answer: "+err.Error()))
			u, estimated = llm.Usage{}, false
			break
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(b); err != nil {
			status = statusClientClosed
		}
	}
	s.finish(ctx, p, sc, c, res, requestID(w), status, u, estimated, time.Since(start))
}
