package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type openaiRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
}

// textOf reads OpenAI content: a string or an array of {type:text,text} parts.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts) //nolint:errcheck
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// lastUserText renders the messages after the last assistant message.
func (r *openaiRequest) lastUserText() string {
	names := toolNames{}
	var parts []string
	for _, m := range r.Messages {
		switch m.Role {
		case "assistant":
			for _, c := range m.ToolCalls {
				names[c.ID] = c.Function.Name
			}
			parts = parts[:0]
		case "tool":
			parts = append(parts, fmt.Sprintf("[tool_result %s] %s", names[m.ToolCallID], textOf(m.Content)))
		case "user":
			parts = append(parts, textOf(m.Content))
		}
	}
	return matchText(parts)
}

func openaiError(w http.ResponseWriter, status int, msg string, retryAfter int) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter > 0 || status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	typ := "server_error"
	switch {
	case status == 429:
		typ = "rate_limit_exceeded"
	case status < 500:
		typ = "invalid_request_error"
	}
	w.Write(jsonMarshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": nil}})) //nolint:errcheck
}

func finishReason(stop string) string {
	switch stop {
	case "tool_use":
		return "tool_calls"
	case "max_tokens":
		return "length"
	}
	return "stop"
}

func openaiUsage(u Usage) map[string]any {
	prompt := u.InputTokens + u.CacheReadInputTokens
	return map[string]any{"prompt_tokens": prompt, "completion_tokens": u.OutputTokens,
		"total_tokens": prompt + u.OutputTokens, "prompt_tokens_details": map[string]any{"cached_tokens": u.CacheReadInputTokens}}
}

func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request) {
	body, err := s.record(r)
	if err != nil {
		return
	}
	var req openaiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openaiError(w, 400, "fake: body is not JSON: "+err.Error(), 0)
		return
	}
	a, err := s.pick(req.lastUserText())
	if err != nil {
		openaiError(w, 500, "fake: "+err.Error(), 0)
		return
	}
	if !wait(r.Context(), a.Latency) {
		return
	}
	if f := a.Fault; f != nil && (f.Kind == FaultStatus || (f.Kind == FaultErrorEvent && !req.Stream)) {
		openaiError(w, f.Status, faultMessage(f), f.RetryAfter)
		return
	}
	id := s.id("chatcmpl")
	u := a.usage(body)
	content := s.contentOf(a)
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		var text strings.Builder
		var calls []any
		for _, b := range content {
			if b["type"] == "text" {
				text.WriteString(b["text"].(string))
				continue
			}
			calls = append(calls, map[string]any{"id": b["id"], "type": "function",
				"function": map[string]any{"name": b["name"], "arguments": string(jsonMarshal(b["input"]))}})
		}
		if text.Len() > 0 {
			msg["content"] = text.String()
		}
		if calls != nil {
			msg["tool_calls"] = calls
		}
		resp := map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(a.stopReason())}}}
		if !a.OmitUsage {
			resp["usage"] = openaiUsage(u)
		}
		b := jsonMarshal(resp)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		if a.Fault != nil && a.Fault.Kind == FaultMalformed {
			b = append(b[:len(b)/2], "<<not json"...)
		}
		if a.Fault != nil && a.Fault.Kind == FaultDisconnect {
			w.Write(b[:len(b)/2]) //nolint:errcheck
			hangUp(w)
			return
		}
		w.Write(b) //nolint:errcheck
		return
	}
	s.openaiStream(w, r, a, req, id, u, content)
}

func (s *Server) openaiStream(w http.ResponseWriter, r *http.Request, a *Answer, req openaiRequest, id string, u Usage, content []map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	count := 0
	created := time.Now().Unix()
	send := func(v any) {
		b, ok := v.([]byte)
		if !ok {
			b = jsonMarshal(v)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
		count++
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	f := a.Fault
	if f != nil && f.Kind == FaultMalformed {
		send([]byte(`{"id":"x","choices":[{not json`))
		return
	}
	pace := &pacer{a: a}
	steps := []func(){func() { send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) }}
	call := 0
	for _, b := range content {
		if b["type"] == "text" {
			for _, p := range chunks(b["text"].(string), a.chunkSize()) {
				steps = append(steps, func() {
					if pace.next(r.Context()) {
						send(chunk(map[string]any{"content": p}, nil))
					}
				})
			}
			continue
		}
		idx := call
		call++
		steps = append(steps, func() {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": idx, "id": b["id"], "type": "function",
				"function": map[string]any{"name": b["name"], "arguments": ""}}}}, nil))
		})
		for _, p := range chunks(string(jsonMarshal(b["input"])), a.chunkSize()) {
			steps = append(steps, func() {
				if pace.next(r.Context()) {
					send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": idx, "function": map[string]any{"arguments": p}}}}, nil))
				}
			})
		}
	}
	steps = append(steps, func() { send(chunk(map[string]any{}, finishReason(a.stopReason()))) })
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage && !a.OmitUsage {
		steps = append(steps, func() {
			send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
				"choices": []any{}, "usage": openaiUsage(u)})
		})
	}
	steps = append(steps, func() { send([]byte("[DONE]")) })
	for _, step := range steps {
		if r.Context().Err() != nil {
			return
		}
		if f != nil && count >= f.After {
			switch f.Kind {
			case FaultDisconnect:
				hangUp(w)
				return
			case FaultErrorEvent:
				send(map[string]any{"error": map[string]any{"message": faultMessage(f), "type": "server_error", "code": nil}})
				return
			}
		}
		step()
	}
}
