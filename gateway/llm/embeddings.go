package llm

import (
	"context"
	"encoding/json"
	"fmt"
)

// EmbeddingRequest is the body of POST /v1/embeddings (the OpenAI form).
// The gateway also accepts a single string as input.
type EmbeddingRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format,omitempty"`
	Dimensions     int      `json:"dimensions,omitempty"`
}

// EmbeddingResponse is the answer of POST /v1/embeddings.
type EmbeddingResponse struct {
	Object string         `json:"object"` // "list"
	Data   []Embedding    `json:"data"`
	Model  string         `json:"model"`
	Usage  EmbeddingUsage `json:"usage"`
}

// Embedding is the vector of the input at Index.
type Embedding struct {
	Object    string    `json:"object"` // "embedding"
	Index     int       `json:"index"`
	Embedding []float32 `json:"embedding"`
}

// EmbeddingUsage is the tokens an embeddings call was metered.
type EmbeddingUsage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// Embed posts /v1/embeddings to the gateway with a token minted for who, the
// scope metered. Refusals are *APIError values. The vectors come as floats:
// an EncodingFormat other than "" or "float" is refused here.
func (c *Client) Embed(ctx context.Context, who Principal, req EmbeddingRequest) (*EmbeddingResponse, error) {
	if req.EncodingFormat != "" && req.EncodingFormat != "float" {
		return nil, fmt.Errorf("gateway: embed: encoding_format %q: the client reads float vectors only", req.EncodingFormat)
	}
	resp, err := c.postJSON(ctx, who, "/v1/embeddings", req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out EmbeddingResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("gateway: embed: decode answer: %w", err)
	}
	return &out, nil
}

// Embedder embeds texts through the gateway for one principal (the scope
// metered) with one model. It satisfies store.Embedder structurally
// (package llm does not import store).
type Embedder struct {
	Client         *Client
	EmbeddingModel string
	Who            Principal
}

// Model is the embedding model; stored vectors record it.
func (e Embedder) Model() string { return e.EmbeddingModel }

// Embed returns one vector per text, in order. Errors are *APIError for the
// gateway's refusals (over budget, rate limited, no credential).
func (e Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	if e.Client == nil {
		return nil, fmt.Errorf("gateway: embed: no client")
	}
	resp, err := e.Client.Embed(ctx, e.Who, EmbeddingRequest{Model: e.EmbeddingModel, Input: texts})
	if err != nil {
		return nil, err
	}
	if len(resp.Data) != len(texts) {
		return nil, fmt.Errorf("gateway: embed: %d vectors for %d texts", len(resp.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, fmt.Errorf("gateway: embed: answer has a bad or repeated index %d", d.Index)
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}
