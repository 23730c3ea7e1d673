package worker

import (
	"context"
	"sync"
)

// toolHooks stop a turn at the points of a tool call, or of its claim,
// where a crash or a concurrent change matters. Tests set them per
// session; in production there are none.
type toolHooks struct {
	// AfterClaim runs once a turn's claim committed, before the turn's
	// first step; ctx is the turn's watch, which a cancel nudge ends.
	AfterClaim func(ctx context.Context, turnID string)
	// BeforeCommit runs after a writing tool's effect, inside its
	// transaction, before its result is stored; an error rolls both back.
	BeforeCommit func(ctx context.Context, toolUseID string) error
	// AfterResult runs once a tool call's result is stored.
	AfterResult func(toolUseID string)
}

// hooksBySession maps a session id to its *toolHooks.
var hooksBySession sync.Map

func hooksFor(session string) *toolHooks {
	if h, ok := hooksBySession.Load(session); ok {
		return h.(*toolHooks)
	}
	return nil
}

func (h *toolHooks) beforeCommit(ctx context.Context, toolUseID string) error {
	if h == nil || h.BeforeCommit == nil {
		return nil
	}
	return h.BeforeCommit(ctx, toolUseID)
}

func (h *toolHooks) afterClaim(ctx context.Context, turnID string) {
	if h != nil && h.AfterClaim != nil {
		h.AfterClaim(ctx, turnID)
	}
}

func (h *toolHooks) afterResult(toolUseID string) {
	if h != nil && h.AfterResult != nil {
		h.AfterResult(toolUseID)
	}
}
