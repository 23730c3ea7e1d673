package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// blocksOf reads content that is a string or an array of blocks.
func blocksOf(raw json.RawMessage) []anthropicBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var blocks []anthropicBlock
	json.Unmarshal(raw, &blocks) //nolint:errcheck // unreadable content matches as empty
	return blocks
}

// lastUserText renders the last user message of an Anthropic request.
func (r *anthropicRequest) lastUserText() string {
	names := toolNames{}
	var parts []string
	for _, m := range r.Messages {
		blocks := blocksOf(m.Content)
		if m.Role == "assistant" {
			for _, b := range blocks {
				if b.Type == "tool_use" {
					names[b.ID] = b.Name
				}
			}
			continue
		}
		parts = parts[:0]
		for _, b := range blocks {
			switch b.Type {
			case "text":
				parts = append(parts, b.Text)
			case "tool_result":
				text := ""
				for _, c := range blocksOf(b.Content) {
					text += c.Text
				}
				parts = append(parts, fmt.Sprintf("[tool_result %s] %s", names[b.ToolUseID], text))
			}
		}
	}
	return matchText(parts)
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string, retryAfter int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_fake")
	if retryAfter > 0 || status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	w.Write(jsonMarshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})) //nolint:errcheck
}

func errorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 429:
		return "rate_limit_error"
	case 529, 503:
		return "overloaded_error"
	}
	return "api_error"
}

func faultMessage(f *Fault) string {
	if f.Message != "" {
		return f.Message
	}
	return fmt.Sprintf("scripted fault: %d %s", f.Status, errorType(f.Status))
}

func (s *Server) serveAnthropic(w http.ResponseWriter, r *http.Request) {
	body, err := s.record(r)
	if err != nil {
		return
	}
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, 400, "invalid_request_error", "fake: body is not JSON: "+err.Error(), 0)
		return
	}
	a, err := s.pick(req.lastUserText())
	if err != nil {
		anthropicError(w, 500, "api_error", "fake: "+err.Error(), 0)
		return
	}
	if !wait(r.Context(), a.Latency) {
		return
	}
	if f := a.Fault; f != nil && (f.Kind == FaultStatus || (f.Kind == FaultErrorEvent && !req.Stream)) {
		anthropicError(w, f.Status, errorType(f.Status), faultMessage(f), f.RetryAfter)
		return
	}
	msgID := s.id("msg")
	u := s.anthropicUsage(a, body)
	if !req.Stream {
		s.anthropicJSON(w, a, req.Model, msgID, u)
		return
	}
	s.anthropicStream(w, r, a, req.Model, msgID, u)
}

func (s *Server) contentOf(a *Answer) []map[string]any {
	out := make([]map[string]any, 0, len(a.Content))
	for _, b := range a.Content {
		if b.ToolUse == nil {
			out = append(out, map[string]any{"type": "text", "text": b.Text})
			continue
		}
		id := b.ToolUse.ID
		if id == "" {
			id = s.id("toolu")
		}
		input := b.ToolUse.Input
		if input == nil {
			input = map[string]any{}
		}
		out = append(out, map[string]any{"type": "tool_use", "id": id, "name": b.ToolUse.Name, "input": input})
	}
	return out
}

func usageJSON(u Usage, omit bool) map[string]any {
	if omit {
		return nil
	}
	return map[string]any{
		"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
		"cache_read_input_tokens": u.CacheReadInputTokens, "cache_creation_input_tokens": u.CacheCreationInputTokens,
	}
}

func (s *Server) anthropicJSON(w http.ResponseWriter, a *Answer, model, id string, u Usage) {
	msg := map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": s.contentOf(a), "stop_reason": a.stopReason(), "stop_sequence": nil,
	}
	if !a.OmitUsage {
		msg["usage"] = usageJSON(u, false)
	}
	body := jsonMarshal(msg)
	w.Header().Set("Content-Type", "application/json")
	if f := a.Fault; f != nil {
		switch f.Kind {
		case FaultMalformed:
			w.WriteHeader(200)
			w.Write(body[:len(body)/2]) //nolint:errcheck
			w.Write([]byte("<<not json"))
			return
		case FaultDisconnect:
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(200)
			w.Write(body[:len(body)/2]) //nolint:errcheck
			hangUp(w)
			return
		}
	}
	w.WriteHeader(200)
	w.Write(body) //nolint:errcheck
}

// sseWriter writes events, counting them for faults that strike after N.
type sseWriter struct {
	w     http.ResponseWriter
	f     http.Flusher
	count int
}

func (e *sseWriter) event(name string, data any) {
	b, ok := data.([]byte)
	if !ok {
		b = jsonMarshal(data)
	}
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b)
	e.f.Flush()
	e.count++
}

func (s *Server) anthropicStream(w http.ResponseWriter, r *http.Request, a *Answer, model, id string, u Usage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	out := &sseWriter{w: w, f: w.(http.Flusher)}
	f := a.Fault
	if f != nil && f.Kind == FaultMalformed {
		out.event("message_start", []byte(`{"type":"message_start","message":{not json`))
		return
	}
	// broken reports whether the fault strikes before the next event, and
	// strikes it.
	broken := func() bool {
		if f == nil || out.count < f.After {
			return false
		}
		switch f.Kind {
		case FaultDisconnect:
			hangUp(w)
			return true
		case FaultErrorEvent:
			out.event("error", map[string]any{"type": "error", "error": map[string]any{"type": errorType(f.Status), "message": faultMessage(f)}})
			return true
		}
		return false
	}
	startUsage := map[string]any{"input_tokens": u.InputTokens, "output_tokens": 1,
		"cache_read_input_tokens": u.CacheReadInputTokens, "cache_creation_input_tokens": u.CacheCreationInputTokens}
	message := map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil}
	if !a.OmitUsage {
		message["usage"] = startUsage
	}
	pace := &pacer{a: a}
	steps := []func(){
		func() { out.event("message_start", map[string]any{"type": "message_start", "message": message}) },
		func() { out.event("ping", map[string]any{"type": "ping"}) },
	}
	for i, b := range s.contentOf(a) {
		var start map[string]any
		var pieces []string
		var delta func(string) map[string]any
		if b["type"] == "text" {
			start = map[string]any{"type": "text", "text": ""}
			pieces = chunks(b["text"].(string), a.chunkSize())
			delta = func(p string) map[string]any { return map[string]any{"type": "text_delta", "text": p} }
		} else {
			start = map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}
			pieces = chunks(string(jsonMarshal(b["input"])), a.chunkSize())
			delta = func(p string) map[string]any { return map[string]any{"type": "input_json_delta", "partial_json": p} }
		}
		steps = append(steps, func() {
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
		})
		for _, p := range pieces {
			steps = append(steps, func() {
				if pace.next(r.Context()) {
					out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": delta(p)})
				}
			})
		}
		steps = append(steps, func() { out.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}) })
	}
	md := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": a.stopReason(), "stop_sequence": nil}}
	if !a.OmitUsage {
		md["usage"] = map[string]any{"output_tokens": u.OutputTokens}
	}
	steps = append(steps,
		func() { out.event("message_delta", md) },
		func() { out.event("message_stop", map[string]any{"type": "message_stop"}) },
	)
	for _, step := range steps {
		if broken() || r.Context().Err() != nil {
			return
		}
		step()
	}
}
