package fakellm

import (
	"encoding/json"
	"net/http"
)

// serveCountTokens answers POST /v1/messages/count_tokens: the tokens of
// the request body at four characters a token, as the fake's usage counts.
func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	body, err := s.record(r)
	if err != nil {
		return
	}
	var req struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, 400, "invalid_request_error", "fake: body is not JSON: "+err.Error(), 0)
		return
	}
	if req.Model == "" || req.Messages == nil {
		anthropicError(w, 400, "invalid_request_error", "fake: model and messages are required", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_fake")
	w.Write(jsonMarshal(map[string]any{"input_tokens": int64(len(body)+3) / 4})) //nolint:errcheck
}
