package api

import (
	"context"
	"regexp"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
)

// traceparentRE is a W3C traceparent of version 00 with ids not all zero
// (checked apart).
var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// maxTracestate bounds a client's tracestate (W3C: 32 members of at most
// 256 bytes each; 512 bytes is what a vendor is asked to keep).
const maxTracestate = 512

// clientTrace is ctx carrying the trace context a planner.send gave in
// its params; ctx as it is without one. A malformed one is refused.
func clientTrace(ctx context.Context, traceparent, tracestate string) (context.Context, error) {
	if traceparent == "" {
		if tracestate != "" {
			return nil, store.Errorf(store.CodeInvalid, "params: field tracestate: given without traceparent")
		}
		return ctx, nil
	}
	if !traceparentRE.MatchString(traceparent) || traceparent[3:35] == zeros[:32] || traceparent[36:52] == zeros[:16] {
		return nil, store.Errorf(store.CodeInvalid,
			"params: field traceparent: must be a W3C traceparent 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, ids not all zero")
	}
	if len(tracestate) > maxTracestate {
		return nil, store.Errorf(store.CodeInvalid, "params: field tracestate: at most %d bytes, got %d", maxTracestate, len(tracestate))
	}
	c := tracing.Carrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	return tracing.Extract(ctx, c), nil
}

// restTrace is a REST request's context carrying the W3C trace context of
// its traceparent and tracestate headers, while tracing is on; a malformed
// traceparent is ignored (the span starts a trace of its own), as W3C
// Trace Context asks of a server.
func restTrace(c *fiber.Ctx) context.Context {
	ctx := c.UserContext()
	if !tracing.On() {
		return ctx
	}
	// fasthttp reuses the header's bytes: the getter copies them.
	return tracing.FromHeaders(ctx, func(k string) string { return strings.Clone(c.Get(k)) })
}

const zeros = "00000000000000000000000000000000"
