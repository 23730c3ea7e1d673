package worker

import (
	"context"

	"github.com/balletplanner/ballet/gateway/llm"
)

// GatewayModel makes the planner's model calls through the gateway client,
// streamed; cancelling ctx closes the call at once.
type GatewayModel struct {
	Client *llm.Client
}

// Call streams one answer, calling onText (when not nil) for each text piece.
func (g GatewayModel) Call(ctx context.Context, who llm.Principal, req llm.MessageRequest, onText func(string)) (*llm.MessageResponse, error) {
	s, err := g.Client.Stream(ctx, who, req)
	if err != nil {
		return nil, err
	}
	return s.Collect(onText)
}
