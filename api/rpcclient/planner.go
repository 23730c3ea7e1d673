package rpcclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ErrDisconnected is wrapped by the error of a call that was in flight, or
// made, while the connection was down.
var ErrDisconnected = errors.New("rpcclient: disconnected")

// Output is one planner.output notification.
type Output struct {
	Subscription string          `json:"subscription" msgpack:"subscription"`
	Session      string          `json:"session" msgpack:"session"`
	Turn         string          `json:"turn" msgpack:"turn"`
	Cursor       int64           `json:"cursor,omitempty" msgpack:"cursor,omitempty"`
	Type         string          `json:"type" msgpack:"type"` // text, tool_call, tool_result, message, compacted, error, done, queued, started
	Text         string          `json:"text,omitempty" msgpack:"text,omitempty"`
	Tool         string          `json:"tool,omitempty" msgpack:"tool,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty" msgpack:"tool_use_id,omitempty"`
	Input        json.RawMessage `json:"input,omitempty" msgpack:"input,omitempty"`
	IsError      bool            `json:"is_error,omitempty" msgpack:"is_error,omitempty"`
	Seq          int64           `json:"seq,omitempty" msgpack:"seq,omitempty"`
	Position     *int64          `json:"position,omitempty" msgpack:"position,omitempty"`
	Role         string          `json:"role,omitempty" msgpack:"role,omitempty"`
	Content      json.RawMessage `json:"content,omitempty" msgpack:"content,omitempty"`
	CreatedAt    time.Time       `json:"created_at,omitzero" msgpack:"created_at,omitempty"`
	// A text output's attempt and place in its round's text; store.LiveText
	// stitches them.
	Attempt   int64 `json:"attempt,omitempty" msgpack:"attempt,omitempty"`
	TextAfter int64 `json:"text_after,omitempty" msgpack:"text_after,omitempty"`
	TextEnd   int64 `json:"text_end,omitempty" msgpack:"text_end,omitempty"`
}

// SendResult is the answer to planner.send.
type SendResult struct {
	Seq      int64  `json:"seq" msgpack:"seq"`
	Turn     string `json:"turn" msgpack:"turn"`
	Position int64  `json:"position" msgpack:"position"`
}

// State is the connection's state, for a UI banner.
type State int

// The states of a Client.
const (
	Connected State = iota
	Disconnected
	Reconnecting
	Closed
)

func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Reconnecting:
		return "reconnecting"
	case Closed:
		return "closed"
	}
	return "unknown"
}

// Send sends text to the session as the turn turn; "" makes a new id.
// A send whose connection is lost is sent again with the same turn once
// the client has reconnected (the server takes a turn id once), until ctx
// ends.
func (c *Client) Send(ctx context.Context, session, text, turn string) (SendResult, error) {
	return c.SendMultitask(ctx, session, text, turn, "")
}

// SendMultitask is Send with what to do while a turn of the session is
// open: "enqueue" (or ""), "reject" or "interrupt" (cancel the open turns
// and run this one next).
func (c *Client) SendMultitask(ctx context.Context, session, text, turn, multitask string) (SendResult, error) {
	if turn == "" {
		turn = uuid.NewString()
	}
	params := map[string]any{"session": session, "text": text, "turn": turn}
	if multitask != "" {
		params["multitask"] = multitask
	}
	for {
		var res SendResult
		cn, err := c.call(ctx, "planner.send", params, &res)
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, ErrDisconnected) || !c.opts.Reconnect || ctx.Err() != nil {
			return SendResult{}, err
		}
		if err := c.waitUp(ctx, cn); err != nil {
			return SendResult{}, fmt.Errorf("rpcclient: planner.send: %w", err)
		}
	}
}

// Cancel cancels the session's turn, or all its turns when turn is "".
func (c *Client) Cancel(ctx context.Context, session, turn string) error {
	params := map[string]any{"session": session}
	if turn != "" {
		params["turn"] = turn
	}
	return c.Call(ctx, "planner.cancel", params, nil)
}
