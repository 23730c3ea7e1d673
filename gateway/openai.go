package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
)

// openaiProvider serves the Messages API from an OpenAI Chat Completions
// upstream (OpenAI, Ollama, vLLM, OpenRouter). The translation is written
// by hand over net/http rather than with an SDK: a proxy needs the wire
// format itself (unknown fields, streamed chunks as they come, any base URL).
type openaiProvider struct{}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

type oaRequest struct {
	Model             string      `json:"model"`
	Messages          []oaMessage `json:"messages"`
	MaxTokens         int         `json:"max_tokens,omitempty"`
	Tools             []oaTool    `json:"tools,omitempty"`
	ToolChoice        any         `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool       `json:"parallel_tool_calls,omitempty"`
	Stop              []string    `json:"stop,omitempty"`
	Temperature       *float64    `json:"temperature,omitempty"`
	TopP              *float64    `json:"top_p,omitempty"`
	User              string      `json:"user,omitempty"`
	Stream            bool        `json:"stream,omitempty"`
	StreamOptions     *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

func strptr(s string) *string { return &s }

// toOpenAI translates a Messages API request into a Chat Completions one.
func toOpenAI(r *llm.MessageRequest) (*oaRequest, error) {
	out := &oaRequest{Model: r.Model, MaxTokens: r.MaxTokens, Stop: r.StopSequences,
		Temperature: r.Temperature, TopP: r.TopP, Stream: r.Stream}
	if r.Stream {
		out.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	if r.Metadata != nil {
		out.User = r.Metadata.UserID
	}
	if sys := r.System.Text(); sys != "" {
		out.Messages = append(out.Messages, oaMessage{Role: "system", Content: strptr(sys)})
	}
	for i, m := range r.Messages {
		switch m.Role {
		case llm.RoleUser:
			// Tool results first: they must follow the assistant's tool calls.
			var text strings.Builder
			for _, b := range m.Content {
				switch b.Type {
				case llm.BlockToolResult:
					content := b.Content.Text()
					if b.IsError {
						content = "Error: " + content
					}
					out.Messages = append(out.Messages, oaMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: strptr(content)})
				case llm.BlockText:
					if text.Len() > 0 {
						text.WriteString("\n\n")
					}
					text.WriteString(b.Text)
				default:
					return nil, fmt.Errorf("messages.%d: %s blocks cannot be sent to an OpenAI-compatible upstream", i, b.Type)
				}
			}
			if text.Len() > 0 {
				out.Messages = append(out.Messages, oaMessage{Role: "user", Content: strptr(text.String())})
			}
		case llm.RoleAssistant:
			msg := oaMessage{Role: "assistant"}
			text := m.Content.Text()
			if text != "" {
				msg.Content = strptr(text)
			}
			for _, b := range m.Content {
				if b.Type != llm.BlockToolUse {
					continue
				}
				var tc oaToolCall
				tc.ID, tc.Type, tc.Function.Name = b.ID, "function", b.Name
				tc.Function.Arguments = string(b.Input)
				if len(b.Input) == 0 {
					tc.Function.Arguments = "{}"
				}
				msg.ToolCalls = append(msg.ToolCalls, tc)
			}
			out.Messages = append(out.Messages, msg)
		default:
			return nil, fmt.Errorf("messages.%d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range r.Tools {
		var ot oaTool
		ot.Type = "function"
		ot.Function.Name, ot.Function.Description, ot.Function.Parameters = t.Name, t.Description, t.InputSchema
		out.Tools = append(out.Tools, ot)
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			out.ToolChoice = "auto"
		case "any":
			out.ToolChoice = "required"
		case "none":
			out.ToolChoice = "none"
		case "tool":
			out.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		}
		if tc.DisableParallelToolUse && len(out.Tools) > 0 {
			f := false
			out.ParallelToolCalls = &f
		}
	}
	return out, nil
}

// prepare translates the body the gateway checked. It decodes it as
// strictly as readRequestHead read it (names exact, none twice, valid
// UTF-8), and only if it reads the model, max_tokens and stream the call
// was admitted on: the upstream gets a translation of what was checked.
func (openaiProvider) prepare(c *call) error {
	var r llm.MessageRequest
	if err := jsonv2.Unmarshal(c.raw, &r); err != nil {
		return &gatewayError{http.StatusBadRequest, llm.ErrInvalidRequest, fmt.Errorf("body: %w", err)}
	}
	if r.Model != c.model || int64(r.MaxTokens) != c.maxTokens || r.Stream != c.stream {
		return fmt.Errorf("openai: translate: the body reads model %q, max_tokens %d, stream %v, not the %q, %d, %v admitted",
			r.Model, r.MaxTokens, r.Stream, c.model, c.maxTokens, c.stream)
	}
	or, err := toOpenAI(&r)
	if err != nil {
		return &gatewayError{http.StatusBadRequest, llm.ErrInvalidRequest, err}
	}
	if c.openaiReq, err = json.Marshal(or); err != nil {
		return fmt.Errorf("openai: encode request: %w", err)
	}
	return nil
}

func (openaiProvider) request(ctx context.Context, c *call) (*http.Request, error) {
	req, err := postRequest(ctx, strings.TrimRight(c.baseURL, "/"), "/chat/completions", c.openaiReq)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	return req, nil
}

// stopReason maps a finish_reason to a stop reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return llm.StopMaxTokens
	case "tool_calls", "function_call":
		return llm.StopToolUse
	case "content_filter":
		return llm.StopRefusal
	}
	return llm.StopEndTurn
}

type oaUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *oaUsage) anthropic() llm.Usage {
	out := llm.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CacheReadInputTokens = u.PromptTokensDetails.CachedTokens
		out.InputTokens -= out.CacheReadInputTokens
	}
	return out
}

func (openaiProvider) message(c *call, body []byte) ([]byte, error) {
	var r struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message      oaMessage `json:"message"`
			FinishReason string    `json:"finish_reason"`
		} `json:"choices"`
		Usage *oaUsage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if len(r.Choices) == 0 {
		return nil, fmt.Errorf("%w: no choices", errMalformed)
	}
	ch := r.Choices[0]
	msg := llm.MessageResponse{ID: r.ID, Type: "message", Role: llm.RoleAssistant, Model: r.Model, Content: llm.Content{},
		StopReason: stopReason(ch.FinishReason)}
	if msg.Model == "" {
		msg.Model = c.model
	}
	if ch.Message.Content != nil && *ch.Message.Content != "" {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockText, Text: *ch.Message.Content})
	}
	for _, tc := range ch.Message.ToolCalls {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockToolUse, ID: tc.ID, Name: tc.Function.Name, Input: llm.ToolInput(tc.Function.Arguments)})
	}
	if len(ch.Message.ToolCalls) > 0 {
		msg.StopReason = llm.StopToolUse
	}
	out, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if r.Usage == nil {
		// Leave usage out so the gateway estimates it and says so.
		var m map[string]any
		json.Unmarshal(out, &m) //nolint:errcheck
		delete(m, "usage")
		return json.Marshal(m)
	}
	u := r.Usage.anthropic()
	msg.Usage = u
	return json.Marshal(msg)
}

func (openaiProvider) events(c *call, body io.ReadCloser) eventSource {
	return &openaiEvents{r: sse.NewReader(body), body: body, model: c.model, blockIndex: -1, toolBlocks: map[int]int{}}
}
