package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/time/rate"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// rpcConn is one /rpc socket: a reader (this goroutine), a bounded outbox
// drained by a goroutine that runs while it holds frames, and the
// heartbeat timer. An idle socket costs one goroutine.
type rpcConn struct {
	srv   *Server
	ws    *websocket.Conn
	ip    string
	codec rpcCodec
	cfg   rpcSettings

	ctx    context.Context // ends when the socket closes
	cancel context.CancelFunc
	// The outbox: frames queued for the socket, written by one drain
	// goroutine that runs only while there are some (an idle socket has
	// none), in order. space is signalled when the drain took frames.
	outMu    sync.Mutex
	outbox   [][]byte
	draining bool
	space    chan struct{}
	drains   sync.WaitGroup
	beat     *time.Timer // the server's heartbeat
	// inflight bounds the requests running at once.
	inflight chan struct{}
	// lastSend is closed when the last planner.send read so far is
	// answered: sends on one connection run one after another, in the
	// order they arrived, so that a human's quick messages are stored in
	// the order typed. Only the reader touches it.
	lastSend chan struct{}
	limiter  *rate.Limiter
	calls    sync.WaitGroup

	closeOnce sync.Once
	closed    chan struct{} // closed once a close frame was sent

	mu   sync.Mutex
	auth *rpcAuth // nil until auth succeeds
	// share is the organization share the socket counts against once it
	// authenticated (rpcShares); "" before.
	share string
	// watches are the connection's planner.watch subscriptions by name
	// (nil while one starts).
	watches map[string]*tasks.Watch
}

func newRPCConn(s *Server, ws *websocket.Conn, ip string) *rpcConn {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := s.rpcCfg
	return &rpcConn{srv: s, ws: ws, ip: ip, cfg: cfg, ctx: ctx, cancel: cancel,
		space: make(chan struct{}, 1), inflight: make(chan struct{}, cfg.maxInflight),
		limiter: rate.NewLimiter(rate.Limit(cfg.perSecond), cfg.burst), closed: make(chan struct{}),
		watches: map[string]*tasks.Watch{}}
}

// silence is how long the client may send nothing before 4000.
func (c *rpcConn) silence() time.Duration { return 3 * c.cfg.heartbeat }

// run serves the socket until it closes.
func (c *rpcConn) run() {
	defer c.cancel()
	c.ws.SetReadLimit(int64(c.cfg.maxFrame))
	alive := func(string) error {
		if c.isClosed() {
			return nil
		}
		return c.ws.SetReadDeadline(time.Now().Add(c.silence()))
	}
	_ = alive("")
	c.ws.SetPongHandler(alive)
	c.outMu.Lock()
	c.beat = time.AfterFunc(c.cfg.heartbeat, c.heartbeat)
	c.outMu.Unlock()
	authTimer := time.AfterFunc(c.cfg.authTimeout, func() {
		if c.principal() == nil {
			c.closeWith(CloseUnauthorized, fmt.Sprintf("no valid auth within %s (server.rpc_auth_timeout)", c.cfg.authTimeout))
		}
	})
	defer authTimer.Stop()
	c.read(alive)
	c.cancel()
	c.calls.Wait()
	c.outMu.Lock() // an enqueue past its check has started its drain
	c.beat.Stop()
	c.outMu.Unlock()
	c.drains.Wait()
}

// read handles frames until the socket fails or closes.
func (c *rpcConn) read(alive func(string) error) {
	for {
		mt, frame, err := c.ws.ReadMessage()
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				c.closeNow(CloseTooBig, fmt.Sprintf("frame exceeds %d bytes (server.rpc_max_frame_bytes)", c.cfg.maxFrame))
			case errors.As(err, &ne) && ne.Timeout() && !c.isClosed():
				c.closeNow(CloseHeartbeat, fmt.Sprintf("no frame from the client for 3 heartbeat intervals (%s)", c.silence()))
			default:
				c.closeNow(websocket.CloseNormalClosure, "")
			}
			return
		}
		_ = alive("")
		if c.isClosed() {
			continue // draining until the client answers the close
		}
		// Each frame is handled on a goroutine of its own, in order: the
		// reader's stack stays the small one of an idle socket.
		done := make(chan struct{})
		go func() { defer close(done); c.handleFrame(mt, frame) }()
		<-done
	}
}

// handleFrame answers one frame: a parse or request error right away,
// a request through dispatch.
func (c *rpcConn) handleFrame(mt int, frame []byte) {
	if mt != c.codec.frameType() {
		kind := map[int]string{websocket.TextMessage: "text", websocket.BinaryMessage: "binary"}
		c.replyError(nil, RPCError{Code: RPCInvalidRequest, Message: fmt.Sprintf("invalid request: this subprotocol takes %s frames, got a %s frame",
			kind[c.codec.frameType()], kind[mt])})
		return
	}
	doc, err := c.codec.toJSON(frame)
	if err != nil {
		c.replyError(nil, RPCError{Code: RPCParseError, Message: "parse error: " + err.Error()})
		return
	}
	req, ferr := parseRequest(doc)
	if ferr != nil {
		c.replyError(ferr.ID, RPCError{Code: ferr.Code, Message: ferr.Message})
		return
	}
	if req.Method == methodHeartbeat && !req.HasID {
		return // liveness only: the read deadline moved already
	}
	if !c.limiter.Allow() {
		if req.HasID {
			c.replyError(&req.ID, RPCError{Code: RPCInvalidRequest, Message: fmt.Sprintf(
				"invalid request: more than %d requests per second on this connection (server.rpc_requests_per_second); slow down", c.cfg.perSecond),
				Data: map[string]any{"code": "resource_exhausted", "retry_after": 1}})
		}
		return
	}
	if c.principal() == nil || isAuthMethod(req.Method) {
		c.dispatch(req) // auth first, and in order
		return
	}
	select {
	case c.inflight <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	var prev, mine chan struct{}
	if req.Method == methodSend {
		prev, mine = c.lastSend, make(chan struct{})
		c.lastSend = mine
	}
	c.calls.Add(1)
	go func() {
		defer c.calls.Done()
		defer func() { <-c.inflight }()
		if mine != nil {
			defer close(mine)
		}
		if prev != nil {
			select {
			case <-prev:
			case <-c.ctx.Done():
				return
			}
		}
		c.dispatch(req)
	}()
}

// dispatch runs one method and answers a request.
func (c *rpcConn) dispatch(req rpcRequest) {
	res, err := c.call(req)
	after, _ := res.(interface{ afterReply() })
	if after != nil {
		defer after.afterReply()
	}
	if !req.HasID {
		return
	}
	if err != nil {
		rerr := RPCErrorOf(err)
		var pe *rpcProtocolError
		if errors.As(err, &pe) {
			rerr = pe.RPCError
		}
		if rerr.Code == RPCInternal {
			c.srv.log.ErrorContext(c.ctx, "rpc method failed", slog.String("method", req.Method), slog.Any("error", err))
		}
		c.replyError(&req.ID, rerr)
		return
	}
	if res == nil {
		res = struct{}{}
	}
	c.send(rpcResponse{JSONRPC: "2.0", ID: &req.ID, Result: res})
}

// rpcResponse is a response frame; ID is null when the request's id could
// not be read.
type rpcResponse struct {
	JSONRPC string    `json:"jsonrpc"`
	ID      *int64    `json:"id"`
	Result  any       `json:"result,omitempty"`
	Error   *RPCError `json:"error,omitempty"`
}

// rpcNotification is a frame without id.
type rpcNotification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

func (c *rpcConn) replyError(id *int64, e RPCError) {
	c.send(rpcResponse{JSONRPC: "2.0", ID: id, Error: &e})
}

// notify queues a notification.
func (c *rpcConn) notify(method string, params any) {
	c.send(rpcNotification{JSONRPC: "2.0", Method: method, Params: params})
}

// send encodes v and queues it.
func (c *rpcConn) send(v any) {
	doc, err := c.codec.encode(v)
	if err != nil {
		c.srv.log.Error("rpc encode", slog.Any("error", err))
		return
	}
	c.enqueue(doc)
}

// enqueue queues an encoded frame for the socket. A client that leaves its
// outbox full for the write timeout is closed: it is not reading.
func (c *rpcConn) enqueue(frame []byte) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.outMu.Lock()
		if c.isClosed() || c.ctx.Err() != nil {
			c.outMu.Unlock()
			return
		}
		if len(c.outbox) < rpcOutboxSize {
			c.outbox = append(c.outbox, frame)
			if !c.draining {
				c.draining = true
				c.drains.Add(1)
				go c.drain()
			}
			c.outMu.Unlock()
			return
		}
		c.outMu.Unlock()
		if timer == nil {
			timer = time.NewTimer(c.cfg.writeTimeout)
		}
		select {
		case <-c.space:
		case <-c.ctx.Done():
			return
		case <-c.closed:
			return
		case <-timer.C:
			c.closeWith(websocket.ClosePolicyViolation, "the client does not read its replies")
			return
		}
	}
}

// drain writes the outbox until it is empty, then ends.
func (c *rpcConn) drain() {
	defer c.drains.Done()
	for {
		c.outMu.Lock()
		batch := c.outbox
		c.outbox = nil
		if len(batch) == 0 || c.isClosed() || c.ctx.Err() != nil {
			c.draining = false
			c.outMu.Unlock()
			return
		}
		c.outMu.Unlock()
		select {
		case c.space <- struct{}{}:
		default:
		}
		for _, b := range batch {
			if c.isClosed() || c.ctx.Err() != nil {
				break
			}
			_ = c.ws.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
			if err := c.ws.WriteMessage(c.codec.frameType(), b); err != nil {
				c.closeNow(websocket.CloseAbnormalClosure, "")
				break
			}
		}
	}
}

// heartbeat pings the client and sends $/heartbeat, every heartbeat
// interval until the socket closes.
func (c *rpcConn) heartbeat() {
	if c.isClosed() || c.ctx.Err() != nil {
		return
	}
	now := time.Now()
	_ = c.ws.WriteControl(websocket.PingMessage, nil, now.Add(c.cfg.writeTimeout))
	c.notify(methodHeartbeat, heartbeatParams{Time: now.UTC().Format(time.RFC3339Nano)})
	c.outMu.Lock()
	if c.ctx.Err() == nil {
		c.beat.Reset(c.cfg.heartbeat)
	}
	c.outMu.Unlock()
}

// notifyOutput queues a planner.output notification.
func (c *rpcConn) notifyOutput(sub string, o store.Output) {
	frame, err := c.codec.output(sub, o)
	if err != nil {
		c.srv.log.Error("rpc encode", slog.Any("error", err))
		return
	}
	c.enqueue(frame)
}

// closeWith sends a close frame and gives the client closeGrace to answer
// it before the socket is dropped.
func (c *rpcConn) closeWith(code int, reason string) {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncate(reason, 110)),
			time.Now().Add(time.Second))
		_ = c.ws.SetReadDeadline(time.Now().Add(closeGrace))
	})
}

// closeNow is closeWith for a reader that stops reading.
func (c *rpcConn) closeNow(code int, reason string) {
	c.closeWith(code, reason)
	c.cancel()
}

func (c *rpcConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}
