package llm

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/tools"
)

// benchRequest is a planner call of the bench's one-round turn: the
// planner's twelve tools, a system prompt of 2.5 KB and nine earlier turns.
func benchRequest(b *testing.B) MessageRequest {
	reg, err := tools.Planner(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	var ts []Tool
	for _, d := range reg.Definitions() {
		ts = append(ts, Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema})
	}
	ts[len(ts)-1].CacheControl = &CacheControl{Type: "ephemeral"}
	req := MessageRequest{Model: "claude-sonnet-4-5", MaxTokens: 4096, Stream: true, Tools: ts,
		System: Content{{Type: BlockText, Text: strings.Repeat("You are Ballet's planner: plan with the team.\n", 55),
			CacheControl: &CacheControl{Type: "ephemeral"}}}}
	for i := range 10 {
		req.Messages = append(req.Messages, Message{Role: RoleUser, Content: Content{{Type: BlockText, Text: "Plan the next milestone of ABC-12, please."}}})
		if i < 9 {
			req.Messages = append(req.Messages, Message{Role: RoleAssistant, Content: Content{{Type: BlockText,
				Text: strings.Repeat("Here is a plan for ABC-12: first the schema, then the api. ", 5)}}})
		}
	}
	req.Messages[len(req.Messages)-1].Content[0].CacheControl = &CacheControl{Type: "ephemeral"}
	return req
}
