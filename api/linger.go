package api

import (
	"io"
	"net"
	"time"
)

// Closing a TCP connection while the client's request body is still arriving
// makes the kernel answer the unread bytes with a reset, and a reset can
// destroy the reply the client has not read yet: a client that sent too large
// a body saw "connection reset by peer" instead of our 413. A lingering close
// (as web servers do) first ends our side of the stream, so the reply and a
// FIN go out, then reads and drops what the client still sends until it
// closes too, for a bounded time and number of bytes.
const (
	lingerTimeout  = 5 * time.Second
	lingerMaxBytes = 64 << 20
)

// lingerListener hands out connections whose Close is a lingering close.
type lingerListener struct{ net.Listener }

// Accept wraps each TCP connection.
func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, nil
}

// lingerConn is a TCP connection with a lingering Close.
type lingerConn struct{ *net.TCPConn }

// Close ends the write side at once and finishes the close in the
// background, so the server's goroutine is not held by a slow client.
func (c *lingerConn) Close() error {
	if err := c.TCPConn.CloseWrite(); err != nil {
		return c.TCPConn.Close()
	}
	go func() {
		_ = c.TCPConn.SetReadDeadline(time.Now().Add(lingerTimeout))
		_, _ = io.CopyN(io.Discard, c.TCPConn, lingerMaxBytes)
		_ = c.TCPConn.Close()
	}()
	return nil
}
