// Package rpcclient is a Go client of Ballet's realtime API (GET /rpc):
// it dials, authenticates, calls methods and delivers notifications.
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
	// when it is full, the reader waits.
	Notifications int
}

// AuthResult is the answer to auth.
type AuthResult struct {
	Subject   string  `json:"subject" msgpack:"subject"`
	ExpiresAt *string `json:"expires_at" msgpack:"expires_at"`
}

// Client is one authenticated /rpc connection. Its methods are safe for
// concurrent use.
type Client struct {
	ws          *websocket.Conn
	subprotocol string
	// Auth is what the server answered to auth.
	Auth AuthResult

	writeMu sync.Mutex
	nextID  atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan reply
	notes   chan Notification
	done    chan struct{}
	err     error // why the connection ended, set before done closes
	once    sync.Once
}

type reply struct {
	result []byte
	err    *Error
}

// Dial opens url (ws:// or wss://…/rpc) with the subprotocol and sends
// auth {token}; it returns once the server accepted the token.
func Dial(ctx context.Context, url, subprotocol, token string, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	d := websocket.Dialer{Subprotocols: []string{subprotocol}, HandshakeTimeout: 10 * time.Second}
	ws, res, err := d.DialContext(ctx, url, opts.Header)
	if err != nil {
		if res != nil {
			return nil, fmt.Errorf("rpcclient: dial %s: %w (HTTP %d)", url, err, res.StatusCode)
		}
		return nil, fmt.Errorf("rpcclient: dial %s: %w", url, err)
	}
	n := opts.Notifications
	if n <= 0 {
		n = 1024
	}
	c := &Client{ws: ws, subprotocol: ws.Subprotocol(), pending: map[int64]chan reply{},
		notes: make(chan Notification, n), done: make(chan struct{})}
	go c.read()
	if err := c.Call(ctx, "auth", map[string]any{"token": token}, &c.Auth); err != nil {
		c.Close()
		return nil, fmt.Errorf("rpcclient: auth: %w", err)
	}
	hb := opts.Heartbeat
	if hb == 0 {
		hb = 15 * time.Second
	}
	if hb > 0 {
		go c.heartbeat(hb)
	}
	return c, nil
}

// Subprotocol is the subprotocol the server chose ("" when none).
func (c *Client) Subprotocol() string { return c.subprotocol }

// Notifications delivers the server's notifications in order; it is
// closed when the connection ends.
func (c *Client) Notifications() <-chan Notification { return c.notes }

// Done is closed when the connection ends; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (a *CloseError when the server closed
// it), or nil while it is open.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Call sends a request and decodes its result into result (nil drops
// it). A JSON-RPC error is returned as *Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	id := c.nextID.Add(1)
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if err := c.write(msg); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		if result == nil {
			return nil
		}
		return c.Decode(r.result, result)
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Notify sends a notification (no reply).
func (c *Client) Notify(method string, params any) error {
	return c.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// Decode decodes raw params or a result of this connection's
// subprotocol into v.
func (c *Client) Decode(raw []byte, v any) error {
	if c.subprotocol == Msgpack {
		dec := msgpack.NewDecoder(bytes.NewReader(raw))
		dec.SetCustomStructTag("json")
		return dec.Decode(v)
	}
	return json.Unmarshal(raw, v)
}

// WriteRaw sends one frame as it is (for tests of malformed input).
func (c *Client) WriteRaw(messageType int, frame []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.ws.WriteMessage(messageType, frame)
}

// Close closes the connection.
func (c *Client) Close() error {
	c.writeMu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	c.writeMu.Unlock()
	c.finish(&CloseError{Code: websocket.CloseNormalClosure, Reason: "closed by the client"})
	return c.ws.Close()
}

func (c *Client) write(msg map[string]any) error {
	var b []byte
	var err error
	mt := websocket.TextMessage
	if c.subprotocol == Msgpack {
		mt = websocket.BinaryMessage
		b, err = msgpack.Marshal(msg)
	} else {
		b, err = json.Marshal(msg)
	}
	if err != nil {
		return fmt.Errorf("rpcclient: encode: %w", err)
	}
	select {
	case <-c.done:
		return c.err
	default:
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.ws.WriteMessage(mt, b); err != nil {
		return fmt.Errorf("rpcclient: write: %w", err)
	}
	return nil
}

func (c *Client) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			_ = c.Notify("$/heartbeat", map[string]any{"time": now.UTC().Format(time.RFC3339Nano)})
		}
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

func (c *Client) read() {
	defer close(c.notes)
	for {
		_, frame, err := c.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				c.finish(&CloseError{Code: ce.Code, Reason: ce.Text})
			} else {
				c.finish(fmt.Errorf("rpcclient: read: %w", err))
			}
			return
		}
		in, err := c.parse(frame)
		if err != nil {
			continue
		}
		if in.ID == nil && in.Method != "" {
			select {
			case c.notes <- Notification{Method: in.Method, Params: in.Params}:
			case <-c.done:
				return
			}
			continue
		}
		if in.ID == nil {
			if in.Error != nil {
				select {
				case c.notes <- Notification{Error: in.Error}:
				case <-c.done:
					return
				}
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[*in.ID]
		c.mu.Unlock()
		if ch != nil {
			ch <- reply{result: in.Result, err: in.Error}
		}
	}
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

func (c *Client) finish(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}
