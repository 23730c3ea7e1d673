package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// embeddingsProvider posts an embeddings call to an OpenAI-compatible
// upstream ({base_url}/embeddings: OpenAI, Ollama, vLLM and the fake all
// serve it) and checks its answer: one vector per input, each index once.
type embeddingsProvider struct {
	want  int    // the inputs sent
	model string // the model asked for, when the answer names none
	out   *embeddingsResult
}

// embeddingsResult is a checked upstream answer.
type embeddingsResult struct {
	model        string
	vectors      []json.RawMessage // by index: an array of floats or a base64 string
	promptTokens int64             // 0 when the upstream reported none
}

func (embeddingsProvider) prepare(*call) error { return nil }

func (embeddingsProvider) request(ctx context.Context, c *call) (*http.Request, error) {
	req, err := postRequest(ctx, strings.TrimRight(c.baseURL, "/"), "/embeddings", c.raw)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return req, nil
}

// events is never called: embeddings are not streamed.
func (embeddingsProvider) events(_ *call, body io.ReadCloser) eventSource {
	body.Close()
	return nil
}

func (p embeddingsProvider) message(_ *call, body []byte) ([]byte, error) {
	var r struct {
		Model string `json:"model"`
		Data  []struct {
			Index     *int            `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage *struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if len(r.Data) != p.want {
		return nil, fmt.Errorf("%w: %d embeddings for %d inputs", errMalformed, len(r.Data), p.want)
	}
	res := embeddingsResult{model: r.Model, vectors: make([]json.RawMessage, p.want)}
	if res.model == "" {
		res.model = p.model
	}
	for i, d := range r.Data {
		at := i
		if d.Index != nil {
			at = *d.Index
		}
		if at < 0 || at >= p.want || res.vectors[at] != nil {
			return nil, fmt.Errorf("%w: embedding index %d out of range or repeated", errMalformed, at)
		}
		v := bytes.TrimSpace(d.Embedding)
		if len(v) == 0 || (v[0] != '[' && v[0] != '"') || !json.Valid(v) {
			return nil, fmt.Errorf("%w: embedding %d is neither an array nor a base64 string", errMalformed, at)
		}
		res.vectors[at] = v
	}
	if r.Usage != nil {
		res.promptTokens = r.Usage.PromptTokens
	}
	*p.out = res
	return body, nil
}

// encode writes the answer in the OpenAI form, the vectors as the upstream
// sent them and the usage as metered.
func (r *embeddingsResult) encode(promptTokens int64) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[`)
	for i, v := range r.vectors {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"object":"embedding","index":%d,"embedding":`, i)
		b.Write(v)
		b.WriteByte('}')
	}
	model, err := json.Marshal(r.model)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(&b, `],"model":%s,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, model, promptTokens, promptTokens)
	return b.Bytes(), nil
}
