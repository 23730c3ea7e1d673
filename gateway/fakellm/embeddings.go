package fakellm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
)

type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     int             `json:"dimensions"`
}

// inputTexts reads an input that is a string or an array of strings.
func inputTexts(raw json.RawMessage) ([]string, bool) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, true
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		return list, true
	}
	return nil, false
}

// FailEmbeddings makes the next n embeddings calls answer status (500 when
// status is 0) with an OpenAI error body.
func (s *Server) FailEmbeddings(n, status int) {
	if status == 0 {
		status = http.StatusInternalServerError
	}
	s.embedFailStatus.Store(int64(status))
	s.embedFails.Store(int64(n))
}

// takeEmbedFailure reports whether this embeddings call is to fail.
func (s *Server) takeEmbedFailure() bool {
	for {
		n := s.embedFails.Load()
		if n <= 0 {
			return false
		}
		if s.embedFails.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, err := s.record(r)
	if err != nil {
		return
	}
	cfg := s.script.Embeddings
	if cfg == nil {
		cfg = &Embeddings{}
	}
	if !wait(r.Context(), cfg.Latency) {
		return
	}
	if s.takeEmbedFailure() {
		openaiError(w, int(s.embedFailStatus.Load()), "fake: embeddings fault", cfg.RetryAfter)
		return
	}
	var req embeddingsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openaiError(w, 400, "fake: body is not JSON: "+err.Error(), 0)
		return
	}
	texts, ok := inputTexts(req.Input)
	switch {
	case req.Model == "":
		openaiError(w, 400, "fake: model is required", 0)
		return
	case !ok:
		openaiError(w, 400, "fake: input must be a string or a non-empty array of strings", 0)
		return
	case req.Dimensions < 0 || req.Dimensions > Dimensions:
		openaiError(w, 400, "fake: dimensions must be between 1 and 256", 0)
		return
	case req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64":
		openaiError(w, 400, "fake: encoding_format must be float or base64", 0)
		return
	}
	data := make([]map[string]any, len(texts))
	for i, t := range texts {
		if t == "" {
			openaiError(w, 400, "fake: input must not contain empty strings", 0)
			return
		}
		v := Embed(t)
		if req.Dimensions > 0 {
			v = shorten(v, req.Dimensions)
		}
		var vec any = v
		if req.EncodingFormat == "base64" {
			vec = encodeBase64(v)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": vec}
	}
	resp := map[string]any{"object": "list", "data": data, "model": req.Model}
	if !cfg.OmitUsage {
		n := embedTokens(texts)
		resp["usage"] = map[string]any{"prompt_tokens": n, "total_tokens": n}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(jsonMarshal(resp)) //nolint:errcheck
}

// shorten keeps the first n dimensions of v, normalised again (as
// OpenAI's text-embedding-3 models do for dimensions).
func shorten(v []float32, n int) []float32 {
	out := append([]float32(nil), v[:n]...)
	norm := 0.0
	for _, x := range out {
		norm += float64(x) * float64(x)
	}
	if norm == 0 {
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for i := range out {
		out[i] = float32(float64(out[i]) / norm)
	}
	return out
}

// encodeBase64 is OpenAI's base64 encoding: little-endian float32s.
func encodeBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
