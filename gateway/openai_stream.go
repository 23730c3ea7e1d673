package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
)

// openaiEvents translates a Chat Completions stream into Anthropic events
// chunk by chunk: message_start at the first chunk, a content block per run
// of text and per tool call, and message_delta (stop reason, usage from the
// include_usage chunk) and message_stop at [DONE].
type openaiEvents struct {
	r     *sse.Reader
	body  io.ReadCloser
	model string

	queue      []sse.Raw
	started    bool
	done       bool
	blockIndex int // the open block, -1 for none
	blockText  bool
	nextIndex  int
	toolBlocks map[int]int // tool call index → block index
	sawTool    bool
	finish     string
	usage      *oaUsage
}

type oaChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Content   *string      `json:"content"`
			ToolCalls []oaToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaUsage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// blockDelta is a content_block_delta, the event most often emitted: a
// struct encodes faster than a map.
type blockDelta struct {
	Type  string    `json:"type"`
	Index int       `json:"index"`
	Delta deltaBody `json:"delta"`
}

type deltaBody struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

func (o *openaiEvents) emit(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps and plain structs are emitted
	}
	o.queue = append(o.queue, sse.Raw{Name: name, Bytes: sse.AppendEvent(make([]byte, 0, len(b)+len(name)+16), sse.Event{Name: name, Data: b})})
}

func (o *openaiEvents) close() { o.body.Close() }

// buffered reports whether translated events are queued; the relay
// flushes once the events of each chunk are written.
func (o *openaiEvents) buffered() bool { return len(o.queue) > 0 }

func (o *openaiEvents) ended() bool { return false }

func (o *openaiEvents) next() (sse.Raw, error) {
	for {
		if len(o.queue) > 0 {
			ev := o.queue[0]
			o.queue = o.queue[1:]
			return ev, nil
		}
		if o.done {
			return sse.Raw{}, io.EOF
		}
		ev, err := o.r.Next()
		if errors.Is(err, io.EOF) {
			if o.finish == "" {
				return sse.Raw{}, io.ErrUnexpectedEOF
			}
			o.finalize()
			continue
		}
		if err != nil {
			return sse.Raw{}, err
		}
		if bytes.Equal(bytes.TrimSpace(ev.Data), []byte("[DONE]")) {
			if !o.started {
				return sse.Raw{}, fmt.Errorf("%w: [DONE] before any chunk", errMalformed)
			}
			o.finalize()
			continue
		}
		var ch oaChunk
		if err := json.Unmarshal(ev.Data, &ch); err != nil {
			return sse.Raw{}, fmt.Errorf("%w: chunk is not JSON: %w", errMalformed, err)
		}
		o.translate(&ch)
	}
}

func (o *openaiEvents) translate(ch *oaChunk) {
	if ch.Error != nil {
		o.emit("error", llm.ErrorBody{Type: "error", Error: llm.ErrorDetail{Type: llm.ErrAPI, Message: cleanMessage(ch.Error.Message)}})
		o.done = true
		return
	}
	if !o.started {
		o.started = true
		model := ch.Model
		if model == "" {
			model = o.model
		}
		o.emit("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": ch.ID, "type": "message", "role": llm.RoleAssistant, "model": model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 0, "output_tokens": 0},
		}})
	}
	if ch.Usage != nil {
		o.usage = ch.Usage
	}
	if len(ch.Choices) == 0 {
		return
	}
	c := ch.Choices[0]
	if t := c.Delta.Content; t != nil && *t != "" {
		if o.blockIndex < 0 || !o.blockText {
			o.closeBlock()
			o.openBlock(true, map[string]any{"type": llm.BlockText, "text": ""})
		}
		o.emit("content_block_delta", blockDelta{Type: "content_block_delta", Index: o.blockIndex,
			Delta: deltaBody{Type: "text_delta", Text: t}})
	}
	for _, tc := range c.Delta.ToolCalls {
		idx := 0
		if tc.Index != nil {
			idx = *tc.Index
		}
		block, seen := o.toolBlocks[idx]
		if !seen {
			o.closeBlock()
			o.sawTool = true
			o.openBlock(false, map[string]any{"type": llm.BlockToolUse, "id": tc.ID, "name": tc.Function.Name, "input": map[string]any{}})
			block = o.blockIndex
			o.toolBlocks[idx] = block
		}
		if tc.Function.Arguments != "" {
			o.emit("content_block_delta", blockDelta{Type: "content_block_delta", Index: block,
				Delta: deltaBody{Type: "input_json_delta", PartialJSON: &tc.Function.Arguments}})
		}
	}
	if c.FinishReason != nil && *c.FinishReason != "" {
		o.finish = *c.FinishReason
	}
}

func (o *openaiEvents) openBlock(text bool, block map[string]any) {
	o.blockIndex, o.blockText = o.nextIndex, text
	o.nextIndex++
	o.emit("content_block_start", map[string]any{"type": "content_block_start", "index": o.blockIndex, "content_block": block})
}

func (o *openaiEvents) closeBlock() {
	if o.blockIndex < 0 {
		return
	}
	o.emit("content_block_stop", map[string]any{"type": "content_block_stop", "index": o.blockIndex})
	o.blockIndex = -1
}

func (o *openaiEvents) finalize() {
	o.closeBlock()
	stop := stopReason(o.finish)
	if o.sawTool && stop == llm.StopEndTurn {
		stop = llm.StopToolUse // some servers finish tool calls with "stop"
	}
	delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}}
	if o.usage != nil {
		u := o.usage.anthropic()
		delta["usage"] = map[string]int64{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
			"cache_read_input_tokens": u.CacheReadInputTokens}
	}
	o.emit("message_delta", delta)
	o.emit("message_stop", map[string]any{"type": "message_stop"})
	o.done = true
}
