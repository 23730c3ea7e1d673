package api

import (
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestReleaseUpgradedRequest: once a request's connection is hijacked (an
// upgraded /rpc socket), its parsed headers are let go; any other request
// keeps them for the rest of its handling.
func TestReleaseUpgradedRequest(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a", 4096)
	for _, hijack := range []bool{true, false} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.Set("X-Padding", big)
		ctx.Request.SetRequestURI("/rpc")
		releaseUpgradedRequest(func(ctx *fasthttp.RequestCtx) {
			if hijack {
				ctx.Hijack(func(net.Conn) {})
			}
		})(&ctx)
		kept := string(ctx.Request.Header.Peek("X-Padding")) == big
		if kept == hijack {
			t.Errorf("hijacked %v: headers kept %v", hijack, kept)
		}
		if hijack && ctx.Request.Header.Len() != 0 {
			t.Errorf("hijacked: %d headers left", ctx.Request.Header.Len())
		}
	}
}
