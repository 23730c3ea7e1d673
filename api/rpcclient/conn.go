package rpcclient

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/vmihailenco/msgpack/v5"
)

// conn is one websocket of a Client.
type conn struct {
	c       *Client
	ws      *websocket.Conn
	writeMu sync.Mutex
	mu      sync.Mutex
	pending map[int64]chan reply
	done    chan struct{} // closed when the socket ended; err says why
	err     error
	once    sync.Once
	exited  chan struct{} // closed when the reader has returned
	gone    chan struct{} // closed once the client no longer uses it
}

// call sends one request on this connection and waits for its reply.
func (cn *conn) call(ctx context.Context, method string, params, result any) error {
	id := cn.c.nextID.Add(1)
	ch := make(chan reply, 1)
	cn.mu.Lock()
	cn.pending[id] = ch
	cn.mu.Unlock()
	defer func() {
		cn.mu.Lock()
		delete(cn.pending, id)
		cn.mu.Unlock()
	}()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if err := cn.write(msg); err != nil {
		return err
	}
	select {
	case r := <-ch:
		return cn.result(r, result)
	case <-cn.done:
		select {
		case r := <-ch:
			return cn.result(r, result)
		default:
			return cn.lost(method)
		}
	case <-ctx.Done():
		return fmt.Errorf("rpcclient: %s: %w", method, ctx.Err())
	}
}

func (cn *conn) result(r reply, result any) error {
	if r.err != nil {
		return r.err
	}
	if result == nil {
		return nil
	}
	return cn.c.Decode(r.result, result)
}

// lost is the error of a call whose connection ended.
func (cn *conn) lost(op string) error {
	return fmt.Errorf("rpcclient: %s: %w: %w", op, ErrDisconnected, cn.err)
}

func (cn *conn) write(msg map[string]any) error {
	var b []byte
	var err error
	mt := websocket.TextMessage
	if cn.c.subprotocol == Msgpack {
		mt = websocket.BinaryMessage
		b, err = msgpack.Marshal(msg)
	} else {
		b, err = json.Marshal(msg)
	}
	if err != nil {
		return fmt.Errorf("rpcclient: encode: %w", err)
	}
	op, _ := msg["method"].(string)
	select {
	case <-cn.done:
		return cn.lost(op)
	default:
	}
	cn.writeMu.Lock()
	defer cn.writeMu.Unlock()
	_ = cn.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := cn.ws.WriteMessage(mt, b); err != nil {
		cn.finish(fmt.Errorf("rpcclient: write: %w", err))
		_ = cn.ws.Close()
		return cn.lost(op)
	}
	return nil
}

// close says goodbye and closes the socket.
func (cn *conn) close() {
	cn.writeMu.Lock()
	_ = cn.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	cn.writeMu.Unlock()
	cn.finish(&CloseError{Code: websocket.CloseNormalClosure, Reason: "closed by the client"})
	_ = cn.ws.Close()
}

func (cn *conn) finish(err error) {
	cn.once.Do(func() {
		cn.err = err
		close(cn.done)
	})
}

func (cn *conn) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-cn.done:
			return
		case now := <-t.C:
			_ = cn.write(map[string]any{"jsonrpc": "2.0", "method": "$/heartbeat",
				"params": map[string]any{"time": now.UTC().Format(time.RFC3339Nano)}})
		}
	}
}

// read delivers replies to their calls, a Watch's outputs to it and other
// notifications to Client.Notifications, until the socket ends.
func (cn *conn) read() {
	defer close(cn.exited)
	defer func() { _ = cn.ws.Close() }()
	c := cn.c
	for {
		_, frame, err := cn.ws.ReadMessage()
		if err != nil {
			cn.finish(closeErr(err))
			return
		}
		in, err := c.parse(frame)
		if err != nil {
			continue
		}
		if in.ID != nil {
			cn.mu.Lock()
			ch := cn.pending[*in.ID]
			cn.mu.Unlock()
			if ch != nil {
				ch <- reply{result: in.Result, err: in.Error}
			}
			continue
		}
		if in.Method == "" && in.Error == nil {
			continue
		}
		if in.Method != "" && c.route(cn, in.Method, in.Params) {
			continue
		}
		n := Notification{Method: in.Method, Params: in.Params, Error: in.Error}
		if n.Method == "$/heartbeat" {
			select {
			case c.notes <- n:
			default: // nobody reads them: drop rather than stall
			}
			continue
		}
		select {
		case c.notes <- n:
		case <-c.closing:
			cn.finish(&CloseError{Code: websocket.CloseNormalClosure, Reason: "closed by the client"})
			return
		}
	}
}
