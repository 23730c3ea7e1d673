package rpcclient

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/sethvargo/go-retry"
)

// dialTimeout bounds one redial with its auth.
const dialTimeout = 15 * time.Second

// run follows the client's connections: when one ends it redials (with
// Reconnect) and resumes the watches, or ends the client.
func (c *Client) run(cn *conn) {
	for {
		<-cn.exited
		c.mu.Lock()
		c.cur, c.up = nil, make(chan struct{})
		clear(c.retired)
		c.mu.Unlock()
		close(cn.gone)
		cause := cn.err
		if c.isClosing() || !c.opts.Reconnect || refused(cause) {
			c.end(cause)
			return
		}
		c.setState(Disconnected)
		next, err := c.redial()
		if err != nil {
			c.end(err)
			return
		}
		c.mu.Lock()
		c.cur = next
		close(c.up)
		ws := make([]*Watch, 0, len(c.open))
		for w := range c.open {
			ws = append(ws, w)
		}
		c.mu.Unlock()
		c.setState(Connected)
		for _, w := range ws {
			go c.resume(w, next)
		}
		cn = next
	}
}

// redial dials until a connection is authenticated, the token is refused
// or the client is closed.
func (c *Client) redial() (*conn, error) {
	b := c.backoff()
	for {
		wait, _ := b.Next()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.closing:
			t.Stop()
			return nil, errClosed
		}
		c.setState(Reconnecting)
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		go func() {
			select {
			case <-c.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		cn, _, err := c.connect(ctx, false)
		cancel()
		switch {
		case err == nil && c.isClosing():
			cn.close()
			<-cn.exited
			return nil, errClosed
		case err == nil:
			return cn, nil
		case c.isClosing():
			return nil, errClosed
		case refused(err):
			return nil, err
		}
	}
}

// errClosed is why a client closed by Close ended.
var errClosed = &CloseError{Code: 1000, Reason: "closed by the client"}

// backoff is the schedule of one redial's waits: doubling from MinBackoff
// up to MaxBackoff, each drawn between half and all of it.
func (c *Client) backoff() retry.Backoff {
	b := retry.WithCappedDuration(c.opts.MaxBackoff, retry.NewExponential(c.opts.MinBackoff))
	return retry.BackoffFunc(func() (time.Duration, bool) {
		d, _ := b.Next()
		return d/2 + rand.N(d/2+1), false
	})
}

// refused says whether err is the server refusing the token, which a
// redial cannot fix.
func refused(err error) bool {
	var re *Error
	var ce *CloseError
	switch {
	case errors.As(err, &re):
		return re.Code == codeUnauthenticated || re.Code == codeForbidden
	case errors.As(err, &ce):
		return ce.Code == closeUnauthorized
	}
	return false
}

// Codes of the server this client acts on.
const (
	codeUnauthenticated = -32001
	codeForbidden       = -32003
	closeUnauthorized   = 4001
)

// end ends the client for good.
func (c *Client) end(err error) {
	if c.isClosing() {
		err = errClosed
	}
	c.err = err
	close(c.done)
	close(c.notes)
	c.mu.Lock()
	ws := make([]*Watch, 0, len(c.open))
	for w := range c.open {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	for _, w := range ws {
		c.endWatch(w, err)
	}
	c.setState(Closed)
}

// States delivers the client's state changes; when nobody reads, only the
// latest is kept.
func (c *Client) States() <-chan State { return c.states }

func (c *Client) setState(s State) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	select {
	case <-c.states:
	default:
	}
	c.states <- s
}

// waitUp waits until a connection other than old is open.
func (c *Client) waitUp(ctx context.Context, old *conn) error {
	for {
		c.mu.Lock()
		cur, up := c.cur, c.up
		c.mu.Unlock()
		if cur != nil && cur != old {
			return nil
		}
		wait := up
		if cur != nil {
			wait = old.gone
		}
		select {
		case <-wait:
		case <-c.done:
			return c.downErr("wait for the connection")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
