package worker

import (
	"slices"
	"strings"

	"github.com/balletplanner/ballet/gateway/llm"
)

// maxBreakpoints is how many cache_control markers Anthropic accepts in one
// request.
const maxBreakpoints = 4

// ephemeral is a fresh marker of the default (five-minute) cache.
func ephemeral() *llm.CacheControl { return &llm.CacheControl{Type: "ephemeral"} }

// markCacheBreakpoints marks req's prompt-caching breakpoints, the
// Anthropic way, within maxBreakpoints in all (markers already in req
// count), in this order of priority:
//   - the last block of the last message: the whole prompt, which the next
//     call repeats and extends;
//   - the last block of the user message before it: where the previous
//     call's prompt ended, so that this call reads it from the cache even
//     when the tool round since added more blocks than Anthropic looks back
//     from a breakpoint for a cached prefix (20);
//   - the last block of the system prompt: tools and system prompt, the same
//     for every call of a session, read again after a compaction changed
//     the conversation and by the human's other sessions of the project;
//   - the last tool definition: the tools, the same for every session.
//
// It changes no slice req shares with its caller: the tools and the
// messages it marks are copies.
func markCacheBreakpoints(req *llm.MessageRequest) {
	left := maxBreakpoints - countBreakpoints(req)
	mark := func(c *llm.Content) {
		if left > 0 && markLast(c) {
			left--
		}
	}
	if last := len(req.Messages) - 1; last >= 0 {
		req.Messages = slices.Clone(req.Messages)
		mark(&req.Messages[last].Content)
		for i := last - 1; i >= 0; i-- {
			if req.Messages[i].Role == llm.RoleUser {
				mark(&req.Messages[i].Content)
				break
			}
		}
	}
	mark(&req.System)
	if n := len(req.Tools); n > 0 && left > 0 && req.Tools[n-1].CacheControl == nil {
		req.Tools = slices.Clone(req.Tools)
		req.Tools[n-1].CacheControl = ephemeral()
	}
}

// markLast marks the last block of c that may carry a breakpoint (neither
// thinking nor empty text), copying c first; it reports whether it set a
// marker, false when the block had one already or none may carry it.
func markLast(c *llm.Content) bool {
	i := markable(*c)
	if i < 0 || (*c)[i].CacheControl != nil {
		return false
	}
	*c = slices.Clone(*c)
	(*c)[i].CacheControl = ephemeral()
	return true
}

// markable is the index of the last block of c that may carry a
// cache_control marker, -1 when none may.
func markable(c llm.Content) int {
	for i := len(c) - 1; i >= 0; i-- {
		switch b := c[i]; {
		case b.Type == llm.BlockThinking || b.Type == "redacted_thinking":
		case b.Type == llm.BlockText && strings.TrimSpace(b.Text) == "":
		default:
			return i
		}
	}
	return -1
}

// countBreakpoints counts the cache_control markers of req.
func countBreakpoints(req *llm.MessageRequest) int {
	n := 0
	for _, t := range req.Tools {
		if t.CacheControl != nil {
			n++
		}
	}
	count := func(c llm.Content) {
		for _, b := range c {
			if b.CacheControl != nil {
				n++
			}
		}
	}
	count(req.System)
	for _, m := range req.Messages {
		count(m.Content)
	}
	return n
}
