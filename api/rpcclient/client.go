// Package rpcclient is a Go client of Ballet's realtime API (GET /rpc):
// it dials, authenticates, calls methods and delivers notifications; with
// Options.Reconnect it redials after a lost connection and resumes its
// watches (see Watch) where they stopped.
package rpcclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/vmihailenco/msgpack/v5"
)

// The subprotocols the server speaks.
const (
	JSON    = "ballet.v1.json"
	Msgpack = "ballet.v1.msgpack"
)

// Error is a JSON-RPC error answered by the server.
type Error struct {
	Code    int            `json:"code" msgpack:"code"`
	Message string         `json:"message" msgpack:"message"`
	Data    map[string]any `json:"data,omitempty" msgpack:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// CloseError is how the socket ended: the server's close code and reason.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("rpc: connection closed %d: %s", e.Code, e.Reason)
}

// Notification is a server-sent message without id.
type Notification struct {
	Method string
	// Params is the raw params: JSON or MessagePack, by subprotocol;
	// decode them with Client.Decode.
	Params []byte
	// Error is set, and Method empty, for an error the server answered
	// with a null id: a frame it could not read as a request.
	Error *Error
}

// Options tune Dial.
type Options struct {
	// Heartbeat is how often the client sends $/heartbeat; 0 means 15 s,
	// a negative value sends none.
	Heartbeat time.Duration
	// Header is sent with the upgrade request (e.g. Origin).
	Header http.Header
	// Notifications is the size of the notification buffer (default 1024);
	// when it is full, the reader waits (the server's heartbeats are
	// dropped instead). Outputs of a Watch do not go there.
	Notifications int
	// Reconnect redials, with jittered and capped backoff, after the
	// connection ends for any reason but Close or a refused token.
	Reconnect bool
	// MinBackoff and MaxBackoff bound the wait between dials (defaults
	// 100 ms and 5 s).
	MinBackoff, MaxBackoff time.Duration
}

// AuthResult is the answer to auth.
type AuthResult struct {
	Subject   string  `json:"subject" msgpack:"subject"`
	ExpiresAt *string `json:"expires_at" msgpack:"expires_at"`
}

// Client is an authenticated /rpc connection, redialled when it is lost
// if Options.Reconnect is set. Its methods are safe for concurrent use.
type Client struct {
	url, token  string
	opts        Options
	subprotocol string
	// Auth is what the server answered to the first auth.
	Auth AuthResult

	nextID  atomic.Int64
	subN    atomic.Int64
	notes   chan Notification
	states  chan State
	stateMu sync.Mutex

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	done      chan struct{} // closed when the client has ended for good
	err       error         // why, set before done closes

	mu      sync.Mutex
	cur     *conn         // nil while disconnected
	up      chan struct{} // closed once cur is set
	watches map[string]*Watch
	open    map[*Watch]struct{}
	retired map[string]bool // subscriptions of closed watches on cur
}

type reply struct {
	result []byte
	err    *Error
}

// Dial opens url (ws:// or wss://…/rpc) with the subprotocol and sends
// auth {token}; it returns once the server accepted the token.
func Dial(ctx context.Context, url, subprotocol, token string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Notifications <= 0 {
		o.Notifications = 1024
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	c := &Client{url: url, token: token, opts: o, subprotocol: subprotocol,
		notes: make(chan Notification, o.Notifications), states: make(chan State, 1),
		closing: make(chan struct{}), done: make(chan struct{}),
		watches: map[string]*Watch{}, open: map[*Watch]struct{}{}, retired: map[string]bool{}}
	cn, auth, err := c.connect(ctx, true)
	if err != nil {
		return nil, err
	}
	c.Auth = auth
	c.cur, c.up = cn, make(chan struct{})
	close(c.up)
	c.setState(Connected)
	go c.run(cn)
	return c, nil
}

// connect dials and authenticates one connection.
func (c *Client) connect(ctx context.Context, first bool) (*conn, AuthResult, error) {
	var auth AuthResult
	d := websocket.Dialer{Subprotocols: []string{c.subprotocol}, HandshakeTimeout: 10 * time.Second}
	ws, res, err := d.DialContext(ctx, c.url, c.opts.Header)
	if err != nil {
		if res != nil {
			return nil, auth, fmt.Errorf("rpcclient: dial %s: %w (HTTP %d)", c.url, err, res.StatusCode)
		}
		return nil, auth, fmt.Errorf("rpcclient: dial %s: %w", c.url, err)
	}
	if first {
		c.subprotocol = ws.Subprotocol()
	}
	cn := &conn{c: c, ws: ws, pending: map[int64]chan reply{}, done: make(chan struct{}),
		exited: make(chan struct{}), gone: make(chan struct{})}
	go cn.read()
	if err := cn.call(ctx, "auth", map[string]any{"token": c.token}, &auth); err != nil {
		cn.close()
		<-cn.exited
		return nil, auth, fmt.Errorf("rpcclient: auth: %w", err)
	}
	if c.opts.Heartbeat > 0 {
		go cn.heartbeat(c.opts.Heartbeat)
	}
	return cn, auth, nil
}

// Subprotocol is the subprotocol the server chose ("" when none).
func (c *Client) Subprotocol() string { return c.subprotocol }

// Notifications delivers the server's notifications in order, but for
// the outputs of a Watch; it is closed when the client ends.
func (c *Client) Notifications() <-chan Notification { return c.notes }

// Done is closed when the client ends (Close, a lost connection without
// Reconnect, or a token refused on a redial); Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the client ended (a *CloseError when the server closed the
// connection), or nil while it runs.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// current is the open connection, or nil while disconnected.
func (c *Client) current() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Call sends a request and decodes its result into result (nil drops
// it). A JSON-RPC error is returned as *Error; a call made or in flight
// while the connection is down fails with an error wrapping
// ErrDisconnected.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	_, err := c.call(ctx, method, params, result)
	return err
}

func (c *Client) call(ctx context.Context, method string, params, result any) (*conn, error) {
	cn := c.current()
	if cn == nil {
		return nil, c.downErr(method)
	}
	return cn, cn.call(ctx, method, params, result)
}

// downErr is the error of a call made while there is no connection.
func (c *Client) downErr(op string) error {
	select {
	case <-c.done:
		return fmt.Errorf("rpcclient: %s: %w: %w", op, ErrDisconnected, c.err)
	default:
		return fmt.Errorf("rpcclient: %s: %w", op, ErrDisconnected)
	}
}

// Notify sends a notification (no reply).
func (c *Client) Notify(method string, params any) error {
	cn := c.current()
	if cn == nil {
		return c.downErr(method)
	}
	return cn.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// Decode decodes raw params or a result of this connection's
// subprotocol into v, by v's json tags.
func (c *Client) Decode(raw []byte, v any) error {
	if c.subprotocol != Msgpack {
		return json.Unmarshal(raw, v)
	}
	// MessagePack carries what the server encoded as JSON: going through
	// JSON decodes json.RawMessage, time.Time and json tags alike.
	dec := msgpack.NewDecoder(bytes.NewReader(raw))
	dec.SetCustomStructTag("json")
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("rpcclient: decode msgpack: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("rpcclient: decode msgpack: %w", err)
	}
	return json.Unmarshal(b, v)
}

// WriteRaw sends one frame as it is (for tests of malformed input).
func (c *Client) WriteRaw(messageType int, frame []byte) error {
	cn := c.current()
	if cn == nil {
		return c.downErr("write")
	}
	cn.writeMu.Lock()
	defer cn.writeMu.Unlock()
	return cn.ws.WriteMessage(messageType, frame)
}

// Close closes the connection and ends the client and its watches.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closing) })
	if cn := c.current(); cn != nil {
		cn.close()
	}
	<-c.done
	return nil
}

func (c *Client) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// incoming is one frame as read: a response or a notification.
type incoming struct {
	ID     *int64          `json:"id" msgpack:"id"`
	Method string          `json:"method" msgpack:"method"`
	Result json.RawMessage `json:"result" msgpack:"-"`
	Error  *Error          `json:"error" msgpack:"error"`
	Params json.RawMessage `json:"params" msgpack:"-"`
}

// parse reads a frame; for MessagePack, result and params are kept as
// MessagePack bytes.
func (c *Client) parse(frame []byte) (incoming, error) {
	var in incoming
	if c.subprotocol != Msgpack {
		err := json.Unmarshal(frame, &in)
		return in, err
	}
	var m map[string]msgpack.RawMessage
	if err := msgpack.Unmarshal(frame, &m); err != nil {
		return in, err
	}
	if raw, ok := m["id"]; ok {
		var id *int64
		if err := msgpack.Unmarshal(raw, &id); err == nil {
			in.ID = id
		}
	}
	_ = msgpack.Unmarshal(m["method"], &in.Method)
	if raw, ok := m["error"]; ok {
		var e Error
		if err := msgpack.Unmarshal(raw, &e); err == nil {
			in.Error = &e
		}
	}
	in.Result = json.RawMessage(m["result"])
	in.Params = json.RawMessage(m["params"])
	return in, nil
}

// closeErr is the error a failed read means.
func closeErr(err error) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return &CloseError{Code: ce.Code, Reason: ce.Text}
	}
	return fmt.Errorf("rpcclient: read: %w", err)
}
