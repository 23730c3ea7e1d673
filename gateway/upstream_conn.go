package gateway

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// directConn is one keep-alive connection of a directTransport.
type directConn struct {
	t      *directTransport
	addr   string
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool   // it answered a call before this one
	head   []byte // the last answer's head, read again into the same bytes

	// Guarded by t.mu.
	idleAt    time.Time   // when it last went back to the pool
	idleTimer *time.Timer // runs expire
	armed     bool        // idleTimer will fire
}

// exchange writes req and reads the head of its answer; unanswered
// reports a failure before any byte of the answer came (on a reused
// connection: the upstream had closed it while idle). The answer's body
// reads the rest from the connection and hands it back to the pool when it
// is closed after its end. The request's context aborts the call at any
// point: a pending read or write fails at once and the connection is
// closed.
func (c *directConn) exchange(req *http.Request) (resp *http.Response, unanswered bool, err error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, c.abort)
	fail := func(err error, unanswered bool) (*http.Response, bool, error) {
		stop()
		c.nc.Close()
		switch {
		case ctx.Err() != nil:
			return nil, false, ctx.Err()
		case isTimeout(err):
			return nil, false, errHeaderTimeout
		}
		return nil, unanswered, err
	}
	if c.t.headerTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.t.headerTimeout))
	}
	err = writeRequest(c.bw, req)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return fail(err, true)
	}
	// The first byte of the answer: an error before it means the upstream
	// never read the request (it had closed the connection while idle).
	if _, err := c.br.Peek(1); err != nil {
		return fail(err, true)
	}
	resp, framing, err := readResponse(c.br, req, &c.head)
	if err != nil {
		return fail(err, false)
	}
	if c.t.headerTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
		if ctx.Err() != nil { // cancelled while the deadline was cleared
			c.abort()
		}
	}
	b := newDirectBody(c, framing, stop, !resp.Close && !req.Close)
	resp.Body = b
	return resp, false, nil
}

// abort fails the connection's pending and later reads and writes.
func (c *directConn) abort() { _ = c.nc.SetDeadline(longAgo) }

// expire closes c once it has been idle for the transport's idle timeout.
func (c *directConn) expire() {
	t := c.t
	t.mu.Lock()
	c.armed = false
	if left := t.idleTimeout - time.Since(c.idleAt); left > 0 {
		c.idleTimer.Reset(left) // used since it was armed: wait out the idle spell
		c.armed = true
		t.mu.Unlock()
		return
	}
	if !t.remove(c) {
		t.mu.Unlock() // in use: its return to the pool arms the timer again
		return
	}
	t.mu.Unlock()
	c.nc.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
