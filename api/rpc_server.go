package api

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	fws "github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/balletplanner/ballet/store"
)

// The subprotocols of /rpc (SPEC §8).
const (
	SubprotocolJSON    = "ballet.v1.json"
	SubprotocolMsgpack = "ballet.v1.msgpack"
)

// Close codes of /rpc beyond RFC 6455's.
const (
	CloseHeartbeat     = 4000 // three heartbeat intervals without a frame from the client
	CloseUnauthorized  = 4001 // no valid auth within server.rpc_auth_timeout
	ClosePolicy        = websocket.ClosePolicyViolation
	CloseTooBig        = websocket.CloseMessageTooBig
	CloseGoingAway     = websocket.CloseGoingAway
	closeGrace         = time.Second
	rpcOutboxSize      = 256
	rpcRetryAfterShort = 5
)

// Defaults of the server.rpc_* keys.
const (
	defaultRPCMaxConnections    = 20000
	defaultRPCHeartbeat         = 15 * time.Second
	defaultRPCAuthTimeout       = 10 * time.Second
	defaultRPCWriteTimeout      = 10 * time.Second
	defaultRPCMaxFrameBytes     = 1 << 20
	defaultRPCMaxInflight       = 32
	defaultRPCRequestsPerSecond = 100
	defaultRPCRequestBurst      = 200
	defaultStreamRecheck        = time.Minute
)

// validOrigin reports whether o is "*" or a browser origin such as
// https://app.example.com.
func validOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && (u.Path == "" || u.Path == "/") &&
		u.RawQuery == "" && u.User == nil && u.Fragment == ""
}

// validateRPC reports the first invalid server.rpc_* key.
func (c Config) validateRPC() error {
	for _, o := range c.RPCAllowedOrigins {
		if !validOrigin(o) {
			return fmt.Errorf("server.rpc_allowed_origins: %q is not an origin such as https://app.example.com or \"*\"", o)
		}
	}
	for _, k := range []struct {
		key string
		v   int
	}{{"server.rpc_max_connections", c.RPCMaxConnections}, {"server.rpc_max_frame_bytes", c.RPCMaxFrameBytes},
		{"server.rpc_max_unauthenticated", c.RPCMaxUnauthenticated},
		{"server.rpc_max_unauthenticated_per_address", c.RPCMaxUnauthenticatedPerAddress},
		{"server.rpc_max_connections_per_organization", c.RPCMaxConnectionsPerOrganization},
		{"server.rpc_max_inflight", c.RPCMaxInflight}, {"server.rpc_requests_per_second", c.RPCRequestsPerSecond},
		{"server.rpc_request_burst", c.RPCRequestBurst}} {
		if k.v < 0 {
			return fmt.Errorf("%s: must be at least 1 (0 takes the default), got %d", k.key, k.v)
		}
	}
	if c.RPCMaxFrameBytes != 0 && c.RPCMaxFrameBytes < 1024 {
		return fmt.Errorf("server.rpc_max_frame_bytes: must be at least 1024, got %d", c.RPCMaxFrameBytes)
	}
	if c.StreamRecheck < 0 {
		return fmt.Errorf("server.stream_recheck: must be positive, got %s", c.StreamRecheck)
	}
	if c.RPCHeartbeat < 0 {
		return fmt.Errorf("server.rpc_heartbeat: must be positive, got %s", c.RPCHeartbeat)
	}
	if c.RPCAuthTimeout < 0 {
		return fmt.Errorf("server.rpc_auth_timeout: must be positive, got %s", c.RPCAuthTimeout)
	}
	if c.RPCWriteTimeout < 0 {
		return fmt.Errorf("server.rpc_write_timeout: must be positive, got %s", c.RPCWriteTimeout)
	}
	return nil
}

// rpcSettings are the effective server.rpc_* values, defaults standing in
// for zero (a Config built in code that leaves them out).
type rpcSettings struct {
	origins  []string
	maxConns int
	// shares of the pool (rpcShares)
	maxUnauth, maxUnauthPerAddr, maxPerOrg int
	heartbeat                              time.Duration
	authTimeout                            time.Duration
	writeTimeout                           time.Duration
	maxFrame                               int
	maxInflight                            int
	perSecond, burst                       int
	recheck                                time.Duration
}

func (c Config) rpc() rpcSettings {
	or := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	ord := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	total := or(c.RPCMaxConnections, defaultRPCMaxConnections)
	unauth := or(c.RPCMaxUnauthenticated, max(64, total/20))
	return rpcSettings{origins: c.RPCAllowedOrigins, maxConns: total,
		maxUnauth: unauth, maxUnauthPerAddr: or(c.RPCMaxUnauthenticatedPerAddress, max(16, unauth/10)),
		maxPerOrg: or(c.RPCMaxConnectionsPerOrganization, max(total/2, min(total, 100))),
		heartbeat: ord(c.RPCHeartbeat, defaultRPCHeartbeat), authTimeout: ord(c.RPCAuthTimeout, defaultRPCAuthTimeout),
		writeTimeout: ord(c.RPCWriteTimeout, defaultRPCWriteTimeout),
		maxFrame:     or(c.RPCMaxFrameBytes, defaultRPCMaxFrameBytes), maxInflight: or(c.RPCMaxInflight, defaultRPCMaxInflight),
		perSecond: or(c.RPCRequestsPerSecond, defaultRPCRequestsPerSecond), burst: or(c.RPCRequestBurst, defaultRPCRequestBurst),
		recheck: ord(c.StreamRecheck, defaultStreamRecheck)}
}

// rpcRegistry holds the open /rpc sockets of the process, so that a
// shutdown can close them (Fiber's own shutdown does not see hijacked
// connections) and the connection limit can be enforced.
type rpcRegistry struct {
	reserved atomic.Int64 // sockets open or being upgraded
	closing  atomic.Bool
	mu       sync.Mutex
	conns    map[*rpcConn]struct{}
	wg       sync.WaitGroup
}

func (r *rpcRegistry) add(c *rpcConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing.Load() {
		return false
	}
	if r.conns == nil {
		r.conns = map[*rpcConn]struct{}{}
	}
	r.conns[c] = struct{}{}
	r.wg.Add(1)
	return true
}

func (r *rpcRegistry) remove(c *rpcConn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	r.reserved.Add(-1)
	r.wg.Done()
}

// drain refuses new sockets, closes every open one with 1001 and waits for
// their handlers up to timeout: the first step of Server.Stop.
func (r *rpcRegistry) drain(timeout time.Duration) {
	r.mu.Lock()
	r.closing.Store(true)
	open := make([]*rpcConn, 0, len(r.conns))
	for c := range r.conns {
		open = append(open, c)
	}
	r.mu.Unlock()
	for _, c := range open {
		c.closeWith(CloseGoingAway, "server shutting down; reconnect")
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// The socket buffers of /rpc: frames larger than a buffer are read and
// written in several pieces.
const (
	rpcReadBuffer  = 512
	rpcWriteBuffer = 4096
)

var rpcWriteBuffers = &sync.Pool{}

// registerRPC mounts GET /rpc.
func (s *Server) registerRPC() {
	s.app.Get("/rpc", s.rpcAdmit, fws.New(s.serveRPC, fws.Config{
		Subprotocols:     []string{SubprotocolJSON, SubprotocolMsgpack},
		HandshakeTimeout: 10 * time.Second,
		// An idle socket holds only its small read buffer: write buffers
		// are shared while a frame is written.
		ReadBufferSize:  rpcReadBuffer,
		WriteBufferSize: rpcWriteBuffer,
		WriteBufferPool: rpcWriteBuffers,
	}))
}

// rpcAdmit checks a /rpc request before the upgrade: a websocket upgrade,
// an allowed Origin, and room under server.rpc_max_connections.
func (s *Server) rpcAdmit(c *fiber.Ctx) error {
	if !fws.IsWebSocketUpgrade(c) {
		return store.Errorf(store.CodeInvalid, "/rpc is a websocket: send a GET with Upgrade: websocket and Sec-WebSocket-Protocol %s or %s",
			SubprotocolJSON, SubprotocolMsgpack)
	}
	if err := checkSubprotocols(c.Get(fiber.HeaderSecWebSocketProtocol)); err != nil {
		return err
	}
	if err := s.checkRPCOrigin(c); err != nil {
		return err
	}
	if s.rpcConns.closing.Load() {
		c.Set(fiber.HeaderRetryAfter, "1")
		return store.Errorf(store.CodeUnavailable, "the server is shutting down; reconnect to another replica")
	}
	limit := int64(s.rpcCfg.maxConns)
	if n := s.rpcConns.reserved.Add(1); n > limit {
		s.rpcConns.reserved.Add(-1)
		c.Set(fiber.HeaderRetryAfter, fmt.Sprint(rpcRetryAfterShort))
		return c.Status(fiber.StatusServiceUnavailable).JSON(errorBody{Error: store.CodeUnavailable,
			Message: fmt.Sprintf("this server holds its limit of %d realtime connections (server.rpc_max_connections); retry later or on another replica", limit)})
	}
	ip := s.remote(c)
	if err := s.shares.admit(ip); err != nil {
		s.rpcConns.reserved.Add(-1)
		c.Set(fiber.HeaderRetryAfter, fmt.Sprint(rpcRetryAfterShort))
		return c.Status(fiber.StatusServiceUnavailable).JSON(errorBody{Error: store.CodeUnavailable, Message: err.Error() + "; retry later"})
	}
	if err := c.Next(); err != nil {
		s.rpcConns.reserved.Add(-1)
		s.shares.release(ip, "")
		return err
	}
	return nil
}

// checkSubprotocols refuses, before the upgrade, a client that offers
// subprotocols of which we speak none: a standard client (a browser, Node's
// ws) fails such a handshake itself and would never see the close 1008
// that follows an upgrade, so it gets a 400 naming ours. A client that
// offers none is upgraded and then closed with 1008 (SPEC §8).
func checkSubprotocols(offered string) error {
	if strings.TrimSpace(offered) == "" {
		return nil
	}
	var names []string
	for _, p := range strings.Split(offered, ",") {
		p = strings.TrimSpace(p)
		if p == SubprotocolJSON || p == SubprotocolMsgpack {
			return nil
		}
		names = append(names, strconv.Quote(p))
	}
	return store.Errorf(store.CodeInvalid, "Sec-WebSocket-Protocol: none of %s is spoken here; offer %s or %s",
		strings.Join(names, ", "), SubprotocolJSON, SubprotocolMsgpack)
}

// checkRPCOrigin allows a request without Origin (not a browser), one from
// the api's own origin, one listed in server.rpc_allowed_origins, and in
// auth.mode local only loopback origins (checkLoopback).
func (s *Server) checkRPCOrigin(c *fiber.Ctx) error {
	if s.auth.Mode == AuthLocal {
		return s.checkLoopback(c)
	}
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return nil
	}
	if slices.Contains(s.rpcCfg.origins, "*") || slices.Contains(s.rpcCfg.origins, strings.TrimSuffix(origin, "/")) {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, string(c.Request().Host())) {
		return nil
	}
	return store.Errorf(store.CodeForbidden,
		"Origin %q may not open /rpc: only the api's own origin and those in server.rpc_allowed_origins may", origin)
}

// serveRPC runs one upgraded socket until it closes.
func (s *Server) serveRPC(ws *fws.Conn) {
	ip, _ := ws.Locals(clientIPKey).(string) // remoteIP, set by the access log
	if ip == "" {
		ip = ws.IP()
	}
	conn := newRPCConn(s, ws.Conn, ip)
	defer func() { s.shares.release(ip, conn.shareKey()) }()
	if !s.rpcConns.add(conn) {
		s.rpcConns.reserved.Add(-1)
		conn.closeNow(CloseGoingAway, "server shutting down; reconnect")
		return
	}
	defer s.rpcConns.remove(conn)
	switch ws.Subprotocol() {
	case SubprotocolJSON:
		conn.codec = jsonCodec{}
	case SubprotocolMsgpack:
		conn.codec = msgpackCodec{}
	default:
		conn.closeNow(ClosePolicy, "subprotocol: offer "+SubprotocolJSON+" or "+SubprotocolMsgpack)
		return
	}
	s.log.Debug("rpc connected", slog.String("ip", conn.ip), slog.String("subprotocol", ws.Subprotocol()))
	conn.run()
}

// releaseUpgradedRequest frees the parsed headers of a request whose
// connection was hijacked, an upgraded /rpc socket: fasthttp keeps the
// request's context for as long as the socket lives (about 1.7 KiB of
// header buffers each), and nothing reads the upgrade request once it has
// been answered.
func releaseUpgradedRequest(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		next(ctx)
		if ctx.Hijacked() {
			ctx.Request = fasthttp.Request{}
		}
	}
}
