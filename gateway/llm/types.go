// Package llm is the model-call API of Ballet's LLM gateway: the wire types
// of the Anthropic Messages API that the gateway serves, the signed tokens a
// caller presents, and the client workers call the gateway with. It holds no
// server code, so that a caller links none.
package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Content block types of the Anthropic Messages API.
const (
	BlockText       = "text"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
	BlockThinking   = "thinking"
)

// Stop reasons of the Anthropic Messages API.
const (
	StopEndTurn   = "end_turn"
	StopMaxTokens = "max_tokens"
	StopSequence  = "stop_sequence"
	StopToolUse   = "tool_use"
	StopPauseTurn = "pause_turn"
	StopRefusal   = "refusal"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// AnthropicVersion is the anthropic-version header of the API served.
const AnthropicVersion = "2023-06-01"

// MessageRequest is the body of POST /v1/messages.
type MessageRequest struct {
	Model         string          `json:"model"`
	MaxTokens     int             `json:"max_tokens"`
	System        Content         `json:"system,omitempty"`
	Messages      []Message       `json:"messages"`
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	TopK          *int            `json:"top_k,omitempty"`
	Metadata      *Metadata       `json:"metadata,omitempty"`
	Thinking      json.RawMessage `json:"thinking,omitempty"`
}

// Metadata is the request metadata of the Messages API.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a list of content blocks; in JSON it also accepts a plain
// string, read as a single text block.
type Content []ContentBlock

// UnmarshalJSON accepts a string or an array of blocks.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content{{Type: BlockText, Text: s}}
		return nil
	}
	var blocks []ContentBlock
	if err := json.Unmarshal(b, &blocks); err != nil {
		return err
	}
	*c = blocks
	return nil
}

// Text joins the text blocks of the content.
func (c Content) Text() string {
	var b bytes.Buffer
	for _, blk := range c {
		if blk.Type == BlockText {
			b.WriteString(blk.Text)
		}
	}
	return b.String()
}

// ContentBlock is one block of a message: text, tool_use, tool_result or
// thinking. Only the fields of its type are set; it is encoded with the
// members of its type (encode_block.go).
type ContentBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// ID and Name identify a tool_use block; Input is its JSON object.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError make a tool_result block.
	ToolUseID string  `json:"tool_use_id,omitempty"`
	Content   Content `json:"content,omitempty"`
	IsError   bool    `json:"is_error,omitempty"`
	// Thinking and Signature make a thinking block.
	Thinking     string        `json:"thinking,omitempty"`
	Signature    string        `json:"signature,omitempty"`
	CacheControl *CacheControl `json:"cache_control,omitempty"`
}

// CacheControl marks a prompt-caching breakpoint.
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// Tool is a tool the model may call.
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
}

// ToolChoice says whether and which tool the model must call: auto, any,
// tool (with Name) or none.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Usage is the token accounting of a response.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
}

// Total is every token of the usage, the unit budgets are counted in.
func (u Usage) Total() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// UsageDelta is the usage object of a stream event or an upstream answer:
// the figures it leaves out are nil.
type UsageDelta struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// ApplyTo sets on u the figures d names (output_tokens is cumulative in
// message_delta) and reports whether any of them is above zero: zeros are
// placeholders, e.g. in a translated message_start. A nil d sets nothing.
func (d *UsageDelta) ApplyTo(u *Usage) (reported bool) {
	if d == nil {
		return false
	}
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
			reported = reported || *v > 0
		}
	}
	set(&u.InputTokens, d.InputTokens)
	set(&u.OutputTokens, d.OutputTokens)
	set(&u.CacheCreationInputTokens, d.CacheCreationInputTokens)
	set(&u.CacheReadInputTokens, d.CacheReadInputTokens)
	return reported
}

// ToolInput is the input of a tool_use block from its JSON text: the text
// itself when it is valid JSON, {} when empty, else the text wrapped as
// {"_raw_arguments": text}.
func ToolInput(args string) json.RawMessage {
	if args == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(map[string]string{"_raw_arguments": args})
	return b
}

// MessageResponse is the answer of a non-streamed call, and the message
// a stream assembles.
type MessageResponse struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      Content `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        Usage   `json:"usage"`
}

// ErrorBody is the Anthropic error envelope {"type":"error","error":{...}}.
type ErrorBody struct {
	Type  string      `json:"type"`
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an error envelope.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Error types of the Anthropic API.
const (
	ErrInvalidRequest = "invalid_request_error"
	ErrAuthentication = "authentication_error"
	ErrPermission     = "permission_error"
	ErrNotFound       = "not_found_error"
	ErrTooLarge       = "request_too_large"
	ErrRateLimit      = "rate_limit_error"
	ErrAPI            = "api_error"
	ErrOverloaded     = "overloaded_error"
)

// APIError is an error answered by the gateway or a provider, in the
// Anthropic form. It is what Client returns for a non-2xx answer or an error
// event in a stream.
type APIError struct {
	// Status is the HTTP status; 0 for an error event inside a stream.
	Status  int
	Type    string
	Message string
	// RetryAfter is the Retry-After header in seconds, when given.
	RetryAfter int
}

// Error renders the status, type and message.
func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("gateway: %s: %s", e.Type, e.Message)
	}
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Type, e.Message)
}

// ErrorTypeForStatus names the Anthropic error type of an HTTP status.
func ErrorTypeForStatus(status int) string {
	switch {
	case status == 400 || status == 422:
		return ErrInvalidRequest
	case status == 401:
		return ErrAuthentication
	case status == 403:
		return ErrPermission
	case status == 404:
		return ErrNotFound
	case status == 413:
		return ErrTooLarge
	case status == 429:
		return ErrRateLimit
	case status == 529 || status == 503:
		return ErrOverloaded
	}
	return ErrAPI
}
