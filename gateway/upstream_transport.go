package gateway

import (
	"bufio"
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// directTransport sends a call to a cleartext http:// upstream on the
// caller's own goroutine: it writes the request and reads the response
// head (upstream_http1.go, into net/http's types) on a pooled keep-alive
// connection, and the relay reads the body on that goroutine
// too. net/http's Transport hands each request to a write goroutine and
// its response over from a read goroutine per connection, which at 200
// concurrent streams costs more than the rest of the relay (see
// docs/decisions.md, "Cleartext upstreams on the caller's goroutine").
//
// Upstreams over TLS (HTTP/2 where the server offers it) and those reached
// through a proxy from the environment go to next, net/http's Transport.
type directTransport struct {
	next  http.RoundTripper
	proxy func(*http.Request) (*url.URL, error)
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	// headerTimeout bounds the wait for the response head (0: none);
	// idleTimeout closes a connection left unused that long (0: never).
	headerTimeout, idleTimeout time.Duration
	maxIdle, maxIdlePerHost    int

	mu    sync.Mutex
	idle  map[string][]*directConn // by host:port, the most recently used last
	nIdle int
}

// errHeaderTimeout is the error of a response head that took longer than
// gateway.header_timeout; net/http's Transport words it the same way.
var errHeaderTimeout = errors.New("timeout awaiting response headers")

// errReadOnClosedBody is a read after Close, as net/http reports it.
var errReadOnClosedBody = errors.New("http: read on closed response body")

// longAgo is a deadline in the past: setting it fails every pending and
// later read and write of the connection at once.
var longAgo = time.Unix(1, 0)

// newDirectTransport keeps connections as next would: at most
// MaxIdleConns (0: no limit) and MaxIdleConnsPerHost (0: 2) idle, each for
// IdleConnTimeout (0: for as long as the upstream keeps them).
func newDirectTransport(next *http.Transport, headerTimeout time.Duration) *directTransport {
	t := &directTransport{
		next: next, proxy: next.Proxy, dial: next.DialContext,
		headerTimeout: headerTimeout, idleTimeout: next.IdleConnTimeout,
		maxIdle: next.MaxIdleConns, maxIdlePerHost: next.MaxIdleConnsPerHost,
		idle: map[string][]*directConn{},
	}
	if t.maxIdle <= 0 {
		t.maxIdle = math.MaxInt
	}
	if t.maxIdlePerHost <= 0 {
		t.maxIdlePerHost = http.DefaultMaxIdleConnsPerHost
	}
	if t.dial == nil {
		t.dial = (&net.Dialer{}).DialContext
	}
	return t
}

// RoundTrip implements http.RoundTripper. A request that fails on a
// reused connection before any byte of the answer came (the upstream had
// closed it while it was idle) is sent once more on a new connection.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || t.proxied(req) {
		return t.next.RoundTrip(req)
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	c, err := t.get(req.Context(), addr, true)
	if err != nil {
		return nil, err
	}
	resp, unanswered, err := c.exchange(req)
	if err == nil || !c.reused || !unanswered || req.GetBody == nil {
		return resp, err
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	again := *req
	again.Body = body
	if c, err = t.get(req.Context(), addr, false); err != nil {
		return nil, err
	}
	resp, _, err = c.exchange(&again)
	return resp, err
}

func (t *directTransport) proxied(req *http.Request) bool {
	if t.proxy == nil {
		return false
	}
	u, err := t.proxy(req)
	return u != nil || err != nil
}

// get takes the most recently used idle connection to addr (when reuse
// is set) or dials a new one.
func (t *directTransport) get(ctx context.Context, addr string, reuse bool) (*directConn, error) {
	if reuse {
		t.mu.Lock()
		if l := t.idle[addr]; len(l) > 0 {
			c := l[len(l)-1]
			l[len(l)-1] = nil
			t.idle[addr] = l[:len(l)-1]
			t.nIdle--
			t.mu.Unlock()
			c.reused = true
			return c, nil
		}
		t.mu.Unlock()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &directConn{t: t, addr: addr, nc: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}, nil
}

// put keeps c for the next call to its address, or closes it when the
// pool is full.
func (t *directTransport) put(c *directConn) {
	t.mu.Lock()
	if len(t.idle[c.addr]) >= t.maxIdlePerHost || t.nIdle >= t.maxIdle {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle[c.addr] = append(t.idle[c.addr], c)
	t.nIdle++
	c.idleAt = time.Now()
	// One timer a connection, armed once an idle timeout rather than reset
	// at every return to the pool: expire waits out the rest of an idle
	// spell that began since it was armed.
	switch {
	case t.idleTimeout <= 0 || c.armed:
	case c.idleTimer == nil:
		c.idleTimer = time.AfterFunc(t.idleTimeout, c.expire)
		c.armed = true
	default:
		c.idleTimer.Reset(t.idleTimeout)
		c.armed = true
	}
	t.mu.Unlock()
}

// remove takes c out of the idle pool; false when it is not there.
func (t *directTransport) remove(c *directConn) bool {
	l := t.idle[c.addr]
	for i, x := range l {
		if x == c {
			t.idle[c.addr] = append(l[:i], l[i+1:]...)
			l[len(l)-1] = nil
			t.nIdle--
			return true
		}
	}
	return false
}

// CloseIdleConnections closes every idle connection, next's too;
// http.Client.CloseIdleConnections calls it.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nIdle = map[string][]*directConn{}, 0
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.nc.Close()
		}
	}
	if tr, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		tr.CloseIdleConnections()
	}
}

// idleConns is the number of idle connections kept.
func (t *directTransport) idleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nIdle
}
