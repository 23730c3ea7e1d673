package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api/rpcclient"
)

// realtimeScript answers at once, then streams the start of a slow answer
// that holds until a file exists at the path formatted in, one nobody
// creates: only a cancel ends it, however slow the machine.
const realtimeScript = `
answers:
  - content:
      - text: "The backlog is empty; start with a milestone."
    chunk_size: 4
  - content:
      - text: "This one takes a long time to think through, one character after another, so that it can be cancelled halfway."
    chunk_size: 1
    chunk_latency: 50ms
    hold_after: 3
    hold_until: %q
`

// TestRealtimeAcrossTwoAPIProcesses sends on one api process and watches
// on another: the watcher sees the turn through done, and a second turn
// sent on the first is cancelled through the second.
func TestRealtimeAcrossTwoAPIProcesses(t *testing.T) {
	t.Parallel()
	s := newStack(t, fmt.Sprintf(realtimeScript, filepath.Join(t.TempDir(), "never")))
	s.env = append(s.env, "BALLET_AUTH_MODE=token")
	token, _, err := s.db.CreateAPIToken(context.Background(), "ann@example.com", "realtime", time.Hour)
	must(t, err)
	a, b := startProcess(t, s.env, "api"), startProcess(t, s.env, "api")
	s.worker()
	a.waitReady(t)
	b.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dial := func(p *process) *rpcclient.Client {
		c, err := rpcclient.Dial(ctx, "ws://"+p.addr+"/rpc", rpcclient.JSON, token, &rpcclient.Options{Reconnect: true})
		must(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	onA, onB := dial(a), dial(b)
	w, err := onB.Watch(ctx, s.session, 0)
	must(t, err)
	defer w.Close()
	// until reads b's outputs of turn through its done.
	until := func(turn string, each func(rpcclient.Output)) rpcclient.Output {
		t.Helper()
		for {
			select {
			case o, ok := <-w.Outputs():
				if !ok {
					t.Fatalf("watch ended: %v", w.Err())
				}
				if o.Turn != turn {
					t.Fatalf("output of another turn %+v", o)
				}
				if each != nil {
					each(o)
				}
				if o.Type == "done" {
					return o
				}
			case <-ctx.Done():
				t.Fatalf("no done of turn %s on api B", turn)
			}
		}
	}
	first, err := onA.Send(ctx, s.session, "What is next?", "")
	must(t, err)
	var text strings.Builder
	done := until(first.Turn, func(o rpcclient.Output) {
		if o.Type == "text" {
			text.WriteString(o.Text)
		}
	})
	if done.Text != "end_turn" || text.String() != "The backlog is empty; start with a milestone." {
		t.Fatalf("first turn on B: done %q, text %q", done.Text, text.String())
	}
	second, err := onA.Send(ctx, s.session, "Think it over", "")
	must(t, err)
	cancelled := false
	done = until(second.Turn, func(o rpcclient.Output) {
		if o.Type == "text" && !cancelled {
			must(t, onB.Cancel(ctx, s.session, second.Turn))
			cancelled = true
		}
	})
	if done.Text != "cancelled" {
		t.Fatalf("second turn on B: done %q, want cancelled", done.Text)
	}
}
