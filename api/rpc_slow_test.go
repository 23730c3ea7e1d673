package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
)

// holdProxy forwards TCP to an address; hold stops reading what the server
// sends on every connection (its bytes pile up in the kernel buffers, then
// in the server), resume reads and forwards it again. The server-side
// socket's read buffer is small, so that little of the server's output fits
// in the kernel.
type holdProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	wake  chan struct{} // closed by resume
	conns []net.Conn
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target, wake: make(chan struct{})}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

// smallReadBufferDialer sets a 4 KiB receive buffer before it connects. Set
// on a connected socket, the buffer would shrink below the window already
// offered to the sender, and TCP would stall in retransmission backoff.
var smallReadBufferDialer = net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	})
	return errors.Join(err, serr)
}}

func (p *holdProxy) url() string { return "ws://" + p.ln.Addr().String() + "/rpc" }

func (p *holdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := smallReadBufferDialer.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			for {
				p.waitResumed()
				n, err := s.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// waitResumed returns once the proxy is not held.
func (p *holdProxy) waitResumed() {
	for {
		p.mu.Lock()
		held, wake := p.held, p.wake
		p.mu.Unlock()
		if !held {
			return
		}
		<-wake
	}
}

// hold stops reading from the server: a read under way forwards what it
// gets, then no more is read until resume.
func (p *holdProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
}

func (p *holdProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

func (p *holdProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.resume()
}

// slowEnv is an api with a planner and a hub, no worker: the test publishes
// a turn's outputs itself, with the publisher the worker uses.
type slowEnv struct {
	*env
	hub     *tasks.Hub
	pub     *tasks.Publisher
	session string
}

func newSlowEnv(t *testing.T) *slowEnv {
	t.Helper()
	e := &slowEnv{env: newEnv(t)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// The slow client's socket must outlast the test's pause however
	// loaded the machine is: it is dropped by lagging, not by this timeout.
	e.restartWith(t, func(c *api.Config) { c.RPCWriteTimeout = 10 * time.Minute }, func(t *testing.T, d *api.Deps, ns string) {
		d.Log = log
		names := tasks.Names{Namespace: ns}
		q := tasks.NewQueue(d.Redis, names, time.Minute)
		t.Cleanup(q.Close)
		e.pub = tasks.NewPublisher(d.Redis, names, log)
		d.Planner = tasks.NewPlanner(d.DB, q, e.pub, store.QueueLimits{Total: 1000, PerProject: 1000}, log)
		e.hub = tasks.NewHub(d.DB, d.Redis, names, log)
		d.Hub = e.hub
	})
	r := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "slow"}).expect(t, 201)
	e.session = r.Body["id"].(string)
	return e
}

// wsFrame is an /rpc frame as the JSON subprotocol sends it.
type wsFrame struct {
	ID     *int64          `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Params struct {
		Subscription string `json:"subscription"`
		Turn         string `json:"turn"`
		Type         string `json:"type"`
		Text         string `json:"text"`
		Reason       string `json:"reason"`
	} `json:"params"`
}

// readFrame reads one frame; a close is returned as *websocket.CloseError.
// A frame that does not come within storetest.WaitTimeout fails the test
// instead of hanging it.
func readFrame(ws *websocket.Conn) (wsFrame, error) {
	var f wsFrame
	_ = ws.SetReadDeadline(time.Now().Add(storetest.WaitTimeout))
	_, b, err := ws.ReadMessage()
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("decode frame %.200q: %w", b, err)
	}
	return f, nil
}

// slowDial opens a JSON /rpc socket to url with small read buffers,
// authenticates as the engineer and watches the session as sub.
func (e *slowEnv) slowDial(t *testing.T, url, sub string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{api.SubprotocolJSON}, HandshakeTimeout: storetest.WaitTimeout, ReadBufferSize: 4096}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	slowCall(t, ws, 1, "auth", map[string]any{"token": e.tokens["engineer"]})
	res := slowCall(t, ws, 2, "planner.watch", map[string]any{"subscription": sub, "session": e.session})
	if !strings.Contains(string(res), `"subscription":"`+sub+`"`) {
		t.Fatalf("planner.watch %s: %s", sub, res)
	}
	return ws
}

// slowCall sends a request and returns its result, failing on an error;
// frames before the reply must be heartbeats.
func slowCall(t *testing.T, ws *websocket.Conn, id int64, method string, params any) json.RawMessage {
	t.Helper()
	if err := ws.WriteJSON(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		t.Fatalf("%s: write: %v", method, err)
	}
	for {
		f, err := readFrame(ws)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		switch {
		case f.ID != nil && *f.ID == id && f.Error == nil:
			return f.Result
		case f.ID != nil:
			t.Fatalf("%s: reply %d, error %+v", method, *f.ID, f.Error)
		case f.Method != "$/heartbeat":
			t.Fatalf("%s: %s before the reply", method, f.Method)
		}
	}
}

const (
	slowDeltas    = 20000 // text deltas of one turn
	slowDeltaSize = 1024
	// slowAhead is how many deltas the publisher may run ahead of what the
	// fast client has read: fewer than a watcher may fall behind
	// (tasks.WatchBuffer), so that the fast one keeps up however slow the
	// machine is.
	slowAhead = 768
)

// slowDelta is the i-th delta: 1 KiB that names its place.
func slowDelta(i int) string {
	head := fmt.Sprintf("%05d|", i)
	return head + strings.Repeat(string(rune('a'+i%26)), slowDeltaSize-len(head))
}

// TestRPCSlowWatcherIsDroppedFastOneKeepsUp watches one session on two
// sockets; one goes through a proxy that stops reading from the server once
// the watch is answered. 20,000 text deltas of 1 KiB are published for the
// session's running turn: the fast watcher gets all of them, in order; the
// slow one is dropped by the hub as lagging and, once its client reads
// again, gets a prefix of the text and stream.closed {reason: lagging} on a
// socket that stays open.
func TestRPCSlowWatcherIsDroppedFastOneKeepsUp(t *testing.T) {
	t.Parallel()
	e := newSlowEnv(t)
	proxy := newHoldProxy(t, e.srv.Addr())
	fast := e.slowDial(t, "ws://"+e.srv.Addr()+"/rpc", "fast")
	slow := e.slowDial(t, proxy.url(), "slow")
	proxy.hold()
	if st := e.hub.Stats(); st.Watchers != 2 || st.Channels != 1 {
		t.Fatalf("hub %+v, want 2 watchers on 1 channel", st)
	}

	// A running turn: sent over REST, claimed as a worker would.
	ctx := context.Background()
	sent := e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer", map[string]any{"text": "Plan"}).expect(t, 202)
	turn, _ := sent.Body["turn"].(string)
	claim, err := e.db.ClaimTurn(ctx, turn, "test-worker", time.Hour)
	if err != nil || claim.State != store.ClaimRun {
		t.Fatalf("claim %s: %v, state %d", turn, err, claim.State)
	}
	e.pub.Publish(ctx, claim.Outputs...)

	// The fast client reads everything; the publisher stays within
	// slowAhead deltas of it.
	var got atomic.Int64 // bytes of text the fast client read
	progress := make(chan struct{}, 1)
	fastDone := make(chan struct{})
	var fastText strings.Builder
	var fastTypes []string
	var fastErr error
	go func() {
		defer close(fastDone)
		defer close(progress)
		for got.Load() < slowDeltas*slowDeltaSize {
			f, err := readFrame(fast)
			if err != nil {
				fastErr = err
				return
			}
			switch {
			case f.Method == "stream.closed":
				fastErr = fmt.Errorf("fast watch closed: %s", f.Params.Reason)
				return
			case f.Method != "planner.output":
				continue
			case f.Params.Subscription != "fast" || f.Params.Turn != turn:
				fastErr = fmt.Errorf("fast client got an output of %q, turn %q", f.Params.Subscription, f.Params.Turn)
				return
			case f.Params.Type != "text":
				fastTypes = append(fastTypes, f.Params.Type)
				continue
			}
			fastText.WriteString(f.Params.Text)
			got.Add(int64(len(f.Params.Text)))
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range slowDeltas {
			for got.Load() < int64(i-slowAhead)*slowDeltaSize {
				if _, ok := <-progress; !ok {
					return // the fast client stopped: its error says why
				}
			}
			e.pub.Publish(ctx, store.Output{Session: e.session, Turn: turn, Type: store.OutputText, Text: slowDelta(i)})
		}
	}()
	t.Cleanup(func() { _ = fast.Close(); <-fastDone; <-published }) // on a failure, before the api stops

	// The hub drops the slow watch as soon as it is WatchBuffer behind.
	storetest.WaitFor(t, "the slow watch released by the hub", func() bool { return e.hub.Stats().Watchers == 1 })
	proxy.resume()

	// The slow client reads again: a prefix of the text, then stream.closed.
	var slowText strings.Builder
	for closed := false; !closed; {
		f, err := readFrame(slow)
		if err != nil {
			t.Fatalf("slow client after %d bytes of text: %v (want stream.closed {reason: lagging} on an open socket)", slowText.Len(), err)
		}
		switch f.Method {
		case "stream.closed":
			if f.Params.Subscription != "slow" || f.Params.Reason != "lagging" {
				t.Fatalf("stream.closed %+v, want subscription slow, reason lagging", f.Params)
			}
			closed = true
		case "planner.output":
			if f.Params.Subscription != "slow" {
				t.Fatalf("slow client got an output of %q", f.Params.Subscription)
			}
			slowText.WriteString(f.Params.Text)
		}
	}
	// Nothing of the watch follows, and the socket still answers.
	if err := slow.WriteJSON(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "system.ping"}); err != nil {
		t.Fatalf("ping: %v", err)
	}
	for answered := false; !answered; {
		f, err := readFrame(slow)
		if err != nil {
			t.Fatalf("slow client after stream.closed: %v", err)
		}
		switch {
		case f.Method == "planner.output":
			t.Fatalf("output after stream.closed: %+v", f.Params)
		case f.ID != nil:
			if *f.ID != 3 || f.Error != nil || !strings.Contains(string(f.Result), `"subject":"engineer@example.com"`) {
				t.Fatalf("ping reply %d: %s %+v", *f.ID, f.Result, f.Error)
			}
			answered = true
		}
	}

	<-fastDone
	<-published
	if fastErr != nil {
		t.Fatalf("fast client after %d of %d bytes: %v", got.Load(), slowDeltas*slowDeltaSize, fastErr)
	}
	var want strings.Builder
	for i := range slowDeltas {
		want.WriteString(slowDelta(i))
	}
	if a, b := fastText.String(), want.String(); a != b {
		i := 0
		for i < min(len(a), len(b)) && a[i] == b[i] {
			i++
		}
		t.Fatalf("fast client's text: %d bytes, want the %d published; they differ from byte %d", len(a), len(b), i)
	}
	if got := strings.Join(fastTypes, ","); got != "queued,started" {
		t.Fatalf("fast client's stored outputs %s, want queued,started", got)
	}
	slowGot := slowText.String()
	if len(slowGot) >= want.Len() || !strings.HasPrefix(want.String(), slowGot) {
		t.Fatalf("slow client's text: %d bytes, want a strict prefix of the %d published", len(slowGot), want.Len())
	}
	if st := e.hub.Stats(); st.Watchers != 1 || st.Channels != 1 {
		t.Fatalf("hub %+v, want the fast watcher alone on 1 channel", st)
	}
}
