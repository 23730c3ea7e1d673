package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store/storetest"
)

// cutProxy forwards TCP to an address; cut drops every connection open,
// mute stops forwarding the server's bytes to the client on them.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[*proxied]struct{}
	cuts   int
	sent   atomic.Int64 // bytes forwarded from clients
}

type proxied struct {
	client, server net.Conn
	mu             sync.Mutex
	muted          bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[*proxied]struct{}{}}
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *cutProxy) url() string { return "ws://" + p.ln.Addr().String() + "/rpc" }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pc := &proxied{client: c, server: s}
		p.mu.Lock()
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, countingReader{c, &p.sent}); _ = s.Close() }()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					pc.mu.Lock()
					muted := pc.muted
					pc.mu.Unlock()
					if !muted {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
				}
				if err != nil {
					break
				}
			}
			_ = c.Close()
		}()
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// cut closes both sides of every open connection.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		_ = pc.client.Close()
		_ = pc.server.Close()
		delete(p.conns, pc)
	}
	p.cuts++
}

// mute drops what the server sends on the connections open now.
func (p *cutProxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		pc.mu.Lock()
		pc.muted = true
		pc.mu.Unlock()
	}
}

const reconnectAnswer = "Reading the backlog one small piece at a time, so that the answer streams for a while and a connection can break in the middle of it."
const reconnectFinal = "Nothing is planned yet; here is a fresh start with one milestone, two epics and a ticket for each."

// reconnectScript answers in two rounds. Each holds after its first four
// deltas (8 characters) until its release file exists, which the test
// creates once it has cut the connection in that round: every round is cut
// mid-stream however slow the machine.
func reconnectScript(t *testing.T) (script string, release [2]string) {
	dir := t.TempDir()
	release = [2]string{filepath.Join(dir, "round-1"), filepath.Join(dir, "round-2")}
	return fmt.Sprintf(`
answers:
  - content:
      - text: "%s"
      - tool_use: {name: list_items, input: {}}
    chunk_size: 2
    chunk_latency: 5ms
    hold_after: 4
    hold_until: %q
  - content:
      - text: "%s"
    chunk_size: 2
    chunk_latency: 5ms
    hold_after: 4
    hold_until: %q
`, reconnectAnswer, release[0], reconnectFinal, release[1]), release
}

// dialReconnecting opens a reconnecting client as engineer through url.
func dialReconnecting(t *testing.T, e *sseEnv, url, proto string) *rpcclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := rpcclient.Dial(ctx, url, proto, e.tokens["engineer"], &rpcclient.Options{Heartbeat: -1,
		Reconnect: true, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRPCClientWatchResumesAcrossReconnects breaks the connection twice
// while a turn streams: the watch still delivers every stored output once,
// in cursor order, and every character of the text once.
func TestRPCClientWatchResumesAcrossReconnects(t *testing.T) {
	t.Parallel()
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			script, release := reconnectScript(t)
			e := newSSEEnv(t, script)
			p := newCutProxy(t, e.srv.Addr())
			c := dialReconnecting(t, e, p.url(), proto)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			w, err := c.Watch(ctx, e.session, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			sent, err := c.Send(ctx, e.session, "Plan", "")
			if err != nil {
				t.Fatal(err)
			}
			// The text a user sees: each round's deltas, then its stored
			// message. A resume after a round's message was stored gets the
			// message and not the rest of the deltas, so the deltas of a
			// round must be a prefix of its message's text, never more.
			var text, round strings.Builder
			var cursor int64
			var types []string
			rounds, cutThisRound := 0, false
			for o := range w.Outputs() {
				if o.Turn != sent.Turn || o.Session != e.session {
					t.Fatalf("output of another turn or session: %+v", o)
				}
				if o.Cursor > 0 {
					if o.Cursor != cursor+1 {
						t.Fatalf("cursor %d after %d (%s)", o.Cursor, cursor, strings.Join(types, ","))
					}
					cursor = o.Cursor
					types = append(types, o.Type)
				}
				if o.Type == "text" {
					round.WriteString(o.Text)
					if !cutThisRound && round.Len() >= 6 && rounds < len(release) { // in each round's text
						p.cut()
						cutThisRound = true
						if err := os.WriteFile(release[rounds], nil, 0o600); err != nil {
							t.Fatal(err)
						}
					}
				}
				if o.Type == "message" && o.Role == "" {
					t.Fatalf("message output without its message: %+v", o)
				}
				if o.Type == "message" && o.Role == "assistant" {
					said := messageText(t, o.Content)
					if !strings.HasPrefix(said, round.String()) {
						t.Fatalf("streamed %q, but the round's message says %q", round.String(), said)
					}
					text.WriteString(said)
					round.Reset()
					rounds, cutThisRound = rounds+1, false
				}
				if o.Type == "done" {
					break
				}
			}
			if want := reconnectAnswer + reconnectFinal; text.String() != want || round.Len() != 0 {
				t.Fatalf("text across reconnects:\n%q (and %q after the last message)\nwant\n%q", text.String(), round.String(), want)
			}
			if got, want := strings.Join(types, ","), "queued,started,message,tool_call,tool_result,message,message,done"; got != want {
				t.Fatalf("stored outputs %s, want %s", got, want)
			}
			if w.Cursor() != cursor || w.Err() != nil {
				t.Fatalf("watch cursor %d err %v, want %d, nil", w.Cursor(), w.Err(), cursor)
			}
			if p.cuts != 2 {
				t.Fatalf("%d cuts, want one in each round", p.cuts)
			}
		})
	}
}

// TestRPCClientSendAcrossAReconnect loses the reply of planner.send: the
// client sends it again with the same turn on the next connection, and
// the session has one turn.
func TestRPCClientSendAcrossAReconnect(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, "")
	p := newCutProxy(t, e.srv.Addr())
	c := dialReconnecting(t, e, p.url(), rpcclient.JSON)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	turns := func() int {
		var n int
		if err := e.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_turns WHERE session_id = $1`, e.session).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	p.mute()
	type result struct {
		res rpcclient.SendResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := c.Send(ctx, e.session, "Plan the release", "")
		got <- result{res, err}
	}()
	storetest.WaitFor(t, "the turn stored", func() bool { return turns() == 1 })
	p.cut()
	r := <-got
	if r.err != nil || r.res.Turn == "" || r.res.Seq < 1 {
		t.Fatalf("send across a reconnect: %+v, %v", r.res, r.err)
	}
	if n := turns(); n != 1 {
		t.Fatalf("%d turns, want 1", n)
	}
	// A call in flight on a lost connection fails as disconnected.
	p.mute()
	before := p.sent.Load()
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "system.ping", nil, nil) }()
	storetest.WaitFor(t, "the ping sent", func() bool { return p.sent.Load() > before })
	p.cut()
	if err := <-errc; !errors.Is(err, rpcclient.ErrDisconnected) {
		t.Fatalf("ping on a lost connection: %v, want ErrDisconnected", err)
	}
}

// messageText joins the text blocks of a stored message's content.
func messageText(t *testing.T, content json.RawMessage) string {
	t.Helper()
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(content, &blocks); err != nil {
		t.Fatalf("message content %s: %v", content, err)
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}
