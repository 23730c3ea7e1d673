package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// sseHeartbeat is how often an idle event stream sends a comment, so that
// proxies keep it open and a client that left is noticed.
const sseHeartbeat = 15 * time.Second

// wantsEventStream reports whether the client asked for server-sent events.
func wantsEventStream(c *fiber.Ctx) bool {
	return strings.Contains(c.Get(fiber.HeaderAccept), "text/event-stream")
}

// streamOutputs is the event-stream twin of planner.watch: the stored
// outputs after Last-Event-ID (or from_cursor), then the live ones, each as
// an event with id = cursor (text deltas have none), event = type and data =
// the output. It ends when the client leaves, on shutdown, or with a
// "closed" event: reason lagging when the client fell too far behind (an
// EventSource then reconnects with Last-Event-ID and resumes), or
// unauthenticated, forbidden or not_found (what a new stream would be
// answered) when a recheck, every server.stream_recheck, found the token or
// the permission gone.
func (s *Server) streamOutputs(c *fiber.Ctx) error {
	from, err := streamCursor(c)
	if err != nil {
		return err
	}
	if s.hub == nil {
		return store.Errorf(store.CodeUnavailable, "live outputs are not served by this api process")
	}
	session := c.Params("session")
	w, err := s.hub.Watch(c.UserContext(), caller(c), session, from)
	if err != nil {
		return err
	}
	// The request's buffers are reused once the handler returns: the
	// stream keeps copies of what its rechecks need.
	token := streamToken(c)
	rc := s.sessionRecheck(s.tokenPrincipal(strings.Clone(token)), strings.Clone(caller(c).Principal.Subject), strings.Clone(session))
	recheckEvery := s.rpcCfg.recheck
	c.Set(fiber.HeaderContentType, "text/event-stream; charset=utf-8")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no") // no proxy buffering
	stopping := s.stopping
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer w.Close()
		defer rc.release()
		hb := time.NewTicker(sseHeartbeat)
		defer hb.Stop()
		tick := time.NewTicker(recheckEvery)
		defer tick.Stop()
		// The headers go out at once, before any output.
		if _, err := bw.WriteString(": watching\n\n"); err != nil || bw.Flush() != nil {
			return
		}
		for {
			select {
			case o, ok := <-w.Outputs():
				if !ok {
					writeClosed(bw, w.Err())
					return
				}
				if writeOutput(bw, o) != nil || bw.Flush() != nil {
					return // the client left
				}
			case <-tick.C:
				if reason := rc.verdict(context.Background()); reason != "" {
					writeClosedReason(bw, reason)
					return
				}
			case <-rc.wake:
				if reason := rc.verdict(context.Background()); reason != "" {
					writeClosedReason(bw, reason)
					return
				}
			case <-hb.C:
				if _, err := bw.WriteString(": heartbeat\n\n"); err != nil || bw.Flush() != nil {
					return
				}
			case <-stopping:
				writeClosed(bw, tasks.ErrHubStopped)
				return
			}
		}
	})
	return nil
}

// streamCursor is where a stream resumes: Last-Event-ID, sent by an
// EventSource that reconnects, wins over from_cursor.
func streamCursor(c *fiber.Ctx) (int64, error) {
	if id := c.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(id), 10, 64)
		if err != nil || n < 0 {
			return 0, store.Errorf(store.CodeInvalid, "Last-Event-ID: must be a non-negative integer (an output cursor), got %q", id)
		}
		return n, nil
	}
	n, err := strconv.ParseInt(c.Query("from_cursor", "0"), 10, 64)
	if err != nil || n < 0 {
		return 0, store.Errorf(store.CodeInvalid, "from_cursor: must be a non-negative integer")
	}
	return n, nil
}

// writeOutput writes one output as an event.
func writeOutput(bw *bufio.Writer, o store.Output) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if o.Cursor > 0 {
		fmt.Fprintf(bw, "id: %d\n", o.Cursor)
	}
	fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", o.Type, data)
	return nil
}

// writeClosed ends a stream with a "closed" event naming why: lagging,
// shutdown, or error. A stream its client closed gets nothing.
func writeClosed(bw *bufio.Writer, err error) {
	reason := ""
	switch {
	case err == nil:
		return
	case errors.Is(err, tasks.ErrLagging):
		reason = "lagging"
	case errors.Is(err, tasks.ErrHubStopped):
		reason = "shutdown"
	default:
		reason = "error"
	}
	writeClosedReason(bw, reason)
}

// writeClosedReason ends a stream with a "closed" event of reason.
func writeClosedReason(bw *bufio.Writer, reason string) {
	fmt.Fprintf(bw, "event: closed\ndata: {\"reason\":%q}\n\n", reason)
	_ = bw.Flush()
}
