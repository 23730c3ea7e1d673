package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// Paging bounds of GET /v1/models, as the Anthropic API has them.
const (
	defaultModelsLimit = 20
	maxModelsLimit     = 1000
)

// modelCreatedAt is the created_at of every listed model: the configuration
// knows no release dates, and the API uses the epoch for an unknown one.
const modelCreatedAt = "1970-01-01T00:00:00Z"

// modelInfo is a model in the Anthropic Models API form, with the
// gateway's price of it when it has one (fields the SDKs ignore).
type modelInfo struct {
	Type        string     `json:"type"`
	ID          string     `json:"id"`
	DisplayName string     `json:"display_name"`
	CreatedAt   string     `json:"created_at"`
	Price       *priceInfo `json:"price,omitempty"`
	// PriceSource is default (a built-in price) or config (gateway.prices).
	PriceSource string `json:"price_source,omitempty"`
}

// priceInfo is a price in US dollars per million tokens, as decimal strings.
type priceInfo struct {
	Input      string `json:"input"`
	Output     string `json:"output"`
	CacheWrite string `json:"cache_write"`
	CacheRead  string `json:"cache_read"`
}

// modelPage is a page of GET /v1/models.
type modelPage struct {
	Data    []modelInfo `json:"data"`
	HasMore bool        `json:"has_more"`
	FirstID *string     `json:"first_id"`
	LastID  *string     `json:"last_id"`
}

// modelsOf lists the chat models a scope's calls may use, from the
// configuration: gateway.anthropic_models when it has an Anthropic
// credential, gateway.openai_models when it has an OpenAI-compatible one,
// and gateway.fake_models when it has none and the fake fallback answers its
// calls, less the embedding models (gateway.embedding_models: the
// Anthropic Models API lists chat models) and those its model allow-lists
// leave out. A name in several lists is listed once, first place kept.
func (s *Server) modelsOf(sc *scope) []string {
	has := map[string]bool{}
	for _, c := range sc.creds {
		has[c.provider] = true
	}
	var lists [][]string
	if has[store.ProviderAnthropic] {
		lists = append(lists, s.cfg.AnthropicModels)
	}
	if has[store.ProviderOpenAI] {
		lists = append(lists, s.cfg.OpenAIModels)
	}
	if len(sc.creds) == 0 && s.fallbackURL != "" {
		lists = append(lists, s.cfg.FakeModels)
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range lists {
		for _, m := range l {
			if !seen[m] && sc.Models.Allows(m) && !slices.Contains(s.cfg.EmbeddingModels, m) {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out
}

func (s *Server) infoOf(id string) modelInfo {
	m := modelInfo{Type: "model", ID: id, DisplayName: id, CreatedAt: modelCreatedAt}
	if p, ok := s.priceOf(id); ok {
		m.Price = &priceInfo{Input: dollars(p.input), Output: dollars(p.output),
			CacheWrite: dollars(p.cacheWrite), CacheRead: dollars(p.cacheRead)}
		m.PriceSource = p.source
	}
	return m
}

// dollars writes micro-USD as dollars without trailing zeros: 3, 0.3.
func dollars(micro int64) string {
	return strings.TrimSuffix(strings.TrimRight(microUSD(micro), "0"), ".")
}

// page cuts the list as the Anthropic API pages it: limit models after
// after_id, before before_id, or from the start.
func page(models []string, limit int, afterID, beforeID string, infoOf func(string) modelInfo) (modelPage, *refusal) {
	index := func(key, id string) (int, *refusal) {
		for i, m := range models {
			if m == id {
				return i, nil
			}
		}
		return 0, refuse(http.StatusBadRequest, llm.ErrInvalidRequest, key+": no listed model has the id "+strconv.Quote(id))
	}
	lo, hi := 0, min(limit, len(models))
	switch {
	case afterID != "" && beforeID != "":
		return modelPage{}, refuse(http.StatusBadRequest, llm.ErrInvalidRequest, "after_id and before_id: set at most one")
	case afterID != "":
		i, ref := index("after_id", afterID)
		if ref != nil {
			return modelPage{}, ref
		}
		lo, hi = i+1, min(i+1+limit, len(models))
	case beforeID != "":
		i, ref := index("before_id", beforeID)
		if ref != nil {
			return modelPage{}, ref
		}
		lo, hi = max(i-limit, 0), i
	}
	p := modelPage{Data: []modelInfo{}}
	for _, m := range models[lo:hi] {
		p.Data = append(p.Data, infoOf(m))
	}
	if beforeID != "" {
		p.HasMore = lo > 0
	} else {
		p.HasMore = hi < len(models)
	}
	if len(p.Data) > 0 {
		first, last := p.Data[0].ID, p.Data[len(p.Data)-1].ID
		p.FirstID, p.LastID = &first, &last
	}
	return p, nil
}

// serveModels answers GET /v1/models: the models of the caller's scope, in
// the Anthropic form the SDKs page through (limit, after_id, before_id).
func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.modelScope(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit := defaultModelsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxModelsLimit {
			writeError(w, http.StatusBadRequest, llm.ErrInvalidRequest, "limit: must be an integer from 1 to "+strconv.Itoa(maxModelsLimit)+", got "+strconv.Quote(v))
			return
		}
		limit = n
	}
	p, ref := page(s.modelsOf(sc), limit, q.Get("after_id"), q.Get("before_id"), s.infoOf)
	if ref != nil {
		anthropicForm.write(w, ref)
		return
	}
	b, _ := json.Marshal(p)
	writeJSON(w, b)
}

// serveModel answers GET /v1/models/{model_id}: one model of the caller's
// scope, or 404 not_found_error.
func (s *Server) serveModel(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.modelScope(w, r)
	if !ok {
		return
	}
	id := r.PathValue("model_id")
	for _, m := range s.modelsOf(sc) {
		if m == id {
			b, _ := json.Marshal(s.infoOf(m))
			writeJSON(w, b)
			return
		}
	}
	writeError(w, http.StatusNotFound, llm.ErrNotFound, "model: "+strconv.Quote(truncate(id, maxModelLen))+
		" is not available to "+sc.name()+"; GET /v1/models lists the models it may use")
}

// modelScope authorises a Models call and resolves its scope.
func (s *Server) modelScope(w http.ResponseWriter, r *http.Request) (*scope, bool) {
	p, ref := s.authorize(r)
	if ref != nil {
		anthropicForm.write(w, ref)
		return nil, false
	}
	sc, ref := s.scopeOf(r.Context(), p)
	if ref != nil {
		anthropicForm.write(w, ref)
		return nil, false
	}
	return sc, true
}
