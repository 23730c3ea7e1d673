package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

// rtClient is one raw /rpc socket of the realtime bench: the bench speaks
// the wire protocol itself, so that what it measures is the server.
type rtClient struct {
	ws     *websocket.Conn
	nextID atomic.Int64
	wmu    sync.Mutex
}

// rtFrame is what the bench reads of a frame.
type rtFrame struct {
	ID     *int64          `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Params json.RawMessage `json:"params"`
}

// rtOutput is what the bench reads of a planner.output.
type rtOutput struct {
	Subscription string `json:"subscription"`
	Session      string `json:"session"`
	Turn         string `json:"turn"`
	Cursor       int64  `json:"cursor"`
	Type         string `json:"type"`
	Text         string `json:"text"`
	ToolUseID    string `json:"tool_use_id"`
}

// dialRT opens a JSON socket from the local address (when set) and sends
// auth {token}, returning once the server accepted it.
func dialRT(ctx context.Context, url, token, local string) (*rtClient, error) {
	d := websocket.Dialer{Subprotocols: []string{"ballet.v1.json"}, HandshakeTimeout: 30 * time.Second,
		ReadBufferSize: 1024, WriteBufferSize: 1024}
	if local != "" {
		nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 30 * time.Second}
		d.NetDialContext = nd.DialContext
	}
	ws, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench realtime: dial: %w", err)
	}
	c := &rtClient{ws: ws}
	if _, err := c.call("auth", map[string]any{"token": token}); err != nil {
		ws.Close()
		return nil, fmt.Errorf("bench realtime: auth: %w", err)
	}
	return c, nil
}

// write sends one JSON-RPC frame.
func (c *rtClient) write(msg map[string]any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// call sends a request and reads frames until its reply; it is only used
// before a reader goroutine runs.
func (c *rtClient) call(method string, params any) (json.RawMessage, error) {
	id := c.nextID.Add(1)
	if err := c.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	defer c.ws.SetReadDeadline(time.Time{})
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		var f rtFrame
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, err
		}
		if f.ID == nil || *f.ID != id {
			continue
		}
		if f.Error != nil {
			return nil, fmt.Errorf("%s: %d %s", method, f.Error.Code, f.Error.Message)
		}
		return f.Result, nil
	}
}

// request sends a request without waiting for its reply.
func (c *rtClient) request(method string, params any) error {
	return c.write(map[string]any{"jsonrpc": "2.0", "id": c.nextID.Add(1), "method": method, "params": params})
}

// heartbeat sends $/heartbeat.
func (c *rtClient) heartbeat() error {
	return c.write(map[string]any{"jsonrpc": "2.0", "method": "$/heartbeat", "params": map[string]any{}})
}

// idleLoop reads (answering the server's pings) until the socket closes.
func (c *rtClient) idleLoop() {
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			return
		}
	}
}

// runRealtimeClients is the hidden helper of `ballet bench realtime`: it
// holds n idle authenticated sockets from one source address, in a process
// of its own, prints "ready N" once all are open and keeps them (sending
// heartbeats) until its stdin closes.
func runRealtimeClients(ctx context.Context, url, token, local string, n, parallel int, out io.Writer) error {
	clients := make([]*rtClient, n)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	next := atomic.Int64{}
	for range max(1, parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := dialRT(ctx, url, token, local)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				clients[i] = c
				go c.idleLoop()
			}
		}()
	}
	wg.Wait()
	open := n - int(failed.Load())
	if open < n {
		fmt.Fprintf(out, "ready %d failed %d: %v\n", open, failed.Load(), firstErr.Load())
	} else {
		fmt.Fprintf(out, "ready %d\n", open)
	}
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			for _, c := range clients {
				if c != nil {
					c.ws.Close()
				}
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			for _, c := range clients {
				if c != nil {
					_ = c.heartbeat()
				}
			}
		}
	}
}

// clientHelper is one running helper process.
type clientHelper struct {
	stdin io.WriteCloser
	wait  func() error
}

// readReady reads the helper's "ready N" line.
func readReady(r io.Reader) (int, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("bench realtime: client helper: %w", err)
	}
	var open int
	if _, err := fmt.Sscanf(line, "ready %d", &open); err != nil {
		return 0, errors.New("bench realtime: client helper said " + strconv.Quote(line))
	}
	return open, nil
}

// perHelper is how many sockets one helper process holds: under the
// machine's RLIMIT_NOFILE with room for the process's own files.
const perHelper = 9900

// idlePhase opens n idle authenticated sockets from helper processes and
// reports the api's RSS and goroutines before and after, and its RSS once
// the sockets have exchanged heartbeats for hold (their buffers grown to
// what they keep: the steady state).
func (e *realtimeBench) idlePhase(ctx context.Context, out io.Writer, n int, hold time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	rss0, g0 := e.settledRSS(), e.apiMetric("go_goroutines")
	heap0, stack0 := e.apiMetric("go_memstats_heap_inuse_bytes"), e.apiMetric("go_memstats_stack_inuse_bytes")
	start := time.Now()
	var helpers []*clientHelper
	defer func() {
		for _, h := range helpers {
			_ = h.stdin.Close()
		}
		for _, h := range helpers {
			_ = h.wait()
		}
	}()
	open := 0
	for i := 0; i*perHelper < n; i++ {
		count := min(perHelper, n-i*perHelper)
		cmd := exec.CommandContext(ctx, exe, "bench", "realtime", "--clients-only", "--url", e.url,
			"--local", fmt.Sprintf("127.0.0.%d", 2+i), "--count", strconv.Itoa(count))
		cmd.Env, cmd.Stderr = os.Environ(), os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("bench realtime: start a client helper: %w", err)
		}
		helpers = append(helpers, &clientHelper{stdin: stdin, wait: cmd.Wait})
		if _, err := io.WriteString(stdin, e.token+"\n"); err != nil {
			return err
		}
		got, err := readReady(stdout)
		if err != nil {
			return err
		}
		open += got
	}
	took := time.Since(start)
	rssN, gN := e.settledRSS(), e.apiMetric("go_goroutines")
	heapN, stackN := e.apiMetric("go_memstats_heap_inuse_bytes"), e.apiMetric("go_memstats_stack_inuse_bytes")
	per := float64(rssN-rss0) / float64(max(open, 1))
	perSocket := func(a, b float64) float64 { return (b - a) / 1024 / float64(max(open, 1)) }
	fmt.Fprintf(out, "idle sockets (JSON subprotocol, authenticated, heartbeats every 10 s; clients in %d helper processes)\n\n", len(helpers))
	fmt.Fprintf(out, "| sockets | opened in | api RSS at 0 | api RSS at N | RSS per socket | goroutines at 0 | at N | per socket | extrapolated RSS at 20,000 |\n|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(out, "| %d | %.1f s | %.1f MiB | %.1f MiB | %.1f KiB | %.0f | %.0f | %.2f | %.0f MiB |\n\n", open, took.Seconds(),
		float64(rss0)/1024, float64(rssN)/1024, per, g0, gN, (gN-g0)/float64(max(open, 1)),
		(float64(rss0)+per*20000)/1024)
	fmt.Fprintf(out, "of which per socket: Go heap in use %.1f KiB, goroutine stacks %.1f KiB (the api's go_memstats_*)\n\n",
		perSocket(heap0, heapN), perSocket(stack0, stackN))
	if open < n {
		return fmt.Errorf("bench realtime: only %d of %d idle sockets opened", open, n)
	}
	if hold > 0 {
		if err := e.steadyState(ctx, out, open, rss0, hold); err != nil {
			return err
		}
	}
	if n < 20000 {
		fmt.Fprintf(out, "(%d, not 20,000: the hard RLIMIT_NOFILE of this machine leaves one process room for no more sockets beside its own files)\n\n", n)
	}
	return nil
}

// steadyState holds the idle sockets for hold while they exchange
// heartbeats and reports the api's highest RSS over the second half of it
// (the collector lets the heap grow to its goal between cycles, so one
// reading may land low), the CPU it used meanwhile and its GC cycles.
func (e *realtimeBench) steadyState(ctx context.Context, out io.Writer, open int, rss0 int64, hold time.Duration) error {
	pid := e.api.Process.Pid
	cpu0, gc0 := cpuSeconds(pid), e.apiMetric("go_gc_duration_seconds_count")
	start := time.Now()
	var peak int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(start) < hold {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Since(start) >= hold/2 {
			peak = max(peak, e.rssKiB())
		}
	}
	if peak == 0 { // a hold shorter than a tick
		peak = e.rssKiB()
	}
	cpu, gcs := cpuSeconds(pid)-cpu0, e.apiMetric("go_gc_duration_seconds_count")-gc0
	perH := float64(peak-rss0) / float64(max(open, 1))
	limit := "none"
	if e.memLimit != "" {
		limit = e.memLimit
	}
	fmt.Fprintf(out, "steady state over %s of heartbeats (GOMEMLIMIT of the api: %s): api RSS at most %.1f MiB over the second half, %.1f KiB per socket, extrapolated at 20,000: %.0f MiB (goal ≤ 400 MiB); api CPU %.1f%% of a core, %.0f GC cycles\n\n",
		hold, limit, float64(peak)/1024, perH, (float64(rss0)+perH*20000)/1024, 100*cpu/time.Since(start).Seconds(), gcs)
	return nil
}
