package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// rpcEnv is newEnv's organization and tokens behind an api with the
// planner and the given server settings, and one planner session.
type rpcEnv struct {
	*env
	session string
	// stop stops the api once (a test may stop it before its cleanup).
	stop func()
}

func newRPCEnv(t *testing.T, mod func(*api.Config)) *rpcEnv {
	t.Helper()
	return newRPCEnvWith(t, mod, nil)
}

// newRPCEnvWith is newRPCEnv whose server's dependencies deps changes.
func newRPCEnvWith(t *testing.T, mod func(*api.Config), deps func(*api.Deps)) *rpcEnv {
	t.Helper()
	e := newEnv(t)
	rdb, rc := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	names := tasks.Names{Namespace: rc.Namespace}
	q := tasks.NewQueue(rdb, names, time.Minute)
	t.Cleanup(q.Close)
	d := api.Deps{DB: e.db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test", RedisNamespace: rc.Namespace,
		Planner: tasks.NewPlanner(e.db, q, tasks.NewPublisher(rdb, names, slog.Default()), store.QueueLimits{Total: 1000, PerProject: 1000}, slog.Default()),
		Hub:     tasks.NewHub(e.db, rdb, names, slog.Default()), Events: tasks.NewEventHub(e.db, slog.Default())}
	if deps != nil {
		deps(&d)
	}
	srv, err := api.New(cfg, api.DefaultAuthConfig(), d)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(srv.Stop)
	t.Cleanup(stop)
	e.srv = srv
	r := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "rpc"}).expect(t, 201)
	return &rpcEnv{env: e, session: r.Body["id"].(string), stop: stop}
}

func (e *rpcEnv) url() string { return "ws://" + e.srv.Addr() + "/rpc" }

// dial opens an authenticated client as the named token holder.
func (e *rpcEnv) dial(t *testing.T, proto, who string) *rpcclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := rpcclient.Dial(ctx, e.url(), proto, e.tokens[who], &rpcclient.Options{Heartbeat: -1})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", proto, who, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawConn is a websocket speaking one subprotocol frame by frame.
type rawConn struct {
	ws    *websocket.Conn
	proto string
	wmu   sync.Mutex // one writer at a time
}

// write sends one frame.
func (c *rawConn) write(mt int, b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.WriteMessage(mt, b)
}

// dialRaw opens an unauthenticated socket offering protos.
func (e *rpcEnv) dialRaw(t *testing.T, header http.Header, protos ...string) (*rawConn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: protos, HandshakeTimeout: 10 * time.Second}
	ws, res, err := d.Dial(e.url(), header)
	if err != nil {
		return nil, res, err
	}
	t.Cleanup(func() { _ = ws.Close() })
	return &rawConn{ws: ws, proto: ws.Subprotocol()}, res, nil
}

// mustRaw is dialRaw that fails the test on error.
func (e *rpcEnv) mustRaw(t *testing.T, proto string) *rawConn {
	t.Helper()
	c, _, err := e.dialRaw(t, nil, proto)
	if err != nil {
		t.Fatalf("dial %s: %v", proto, err)
	}
	return c
}

// encode turns a frame given as a Go value into this subprotocol's bytes;
// []byte is sent as it is.
func (c *rawConn) encode(v any) ([]byte, int) {
	mt := websocket.TextMessage
	if c.proto == api.SubprotocolMsgpack {
		mt = websocket.BinaryMessage
	}
	if b, ok := v.([]byte); ok {
		return b, mt
	}
	if c.proto == api.SubprotocolMsgpack {
		b, err := msgpack.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b, mt
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b, mt
}

func (c *rawConn) send(t *testing.T, v any) {
	t.Helper()
	b, mt := c.encode(v)
	if err := c.write(mt, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// recv reads one message, decoded with the subprotocol's library; a close
// is returned as its code.
func (c *rawConn) recv(t *testing.T) (map[string]any, int) {
	t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	mt, b, err := c.ws.ReadMessage()
	if err != nil {
		if ce, ok := err.(*websocket.CloseError); ok {
			return nil, ce.Code
		}
		t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if c.proto == api.SubprotocolMsgpack {
		if mt != websocket.BinaryMessage {
			t.Fatalf("msgpack reply in a text frame: %s", b)
		}
		err = msgpack.Unmarshal(b, &m)
	} else {
		if mt != websocket.TextMessage {
			t.Fatalf("json reply in a binary frame")
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		err = d.Decode(&m)
	}
	if err != nil {
		t.Fatalf("decode reply %q: %v", b, err)
	}
	return m, 0
}

// reply reads until a response (skipping notifications).
func (c *rawConn) reply(t *testing.T) (map[string]any, int) {
	t.Helper()
	for {
		m, closed := c.recv(t)
		if closed != 0 {
			return nil, closed
		}
		if _, ok := m["method"]; !ok {
			return m, 0
		}
	}
}

// call sends a request with id and returns the reply.
func (c *rawConn) call(t *testing.T, id int, method string, params any) map[string]any {
	t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	c.send(t, msg)
	m, closed := c.reply(t)
	if closed != 0 {
		t.Fatalf("%s: closed %d", method, closed)
	}
	return m
}

// num reads a number decoded by either library.
func num(v any) int64 {
	switch x := v.(type) {
	case json.Number:
		n, _ := x.Int64()
		return n
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float64:
		return int64(x)
	}
	return -1
}

// rpcErr is the code and message of a reply's error (0, "" when none).
func rpcErr(m map[string]any) (int64, string) {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return 0, ""
	}
	msg, _ := e["message"].(string)
	return num(e["code"]), msg
}

func expectErr(t *testing.T, m map[string]any, code int64, contains string) {
	t.Helper()
	got, msg := rpcErr(m)
	if got != code || !strings.Contains(msg, contains) {
		t.Fatalf("error %d %q, want %d containing %q; reply %v", got, msg, code, contains, m)
	}
}

// expectClose reads until the socket closes and checks its code.
func (c *rawConn) expectClose(t *testing.T, code int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("still open, want close %d", code)
		}
		_, closed := c.recv(t)
		if closed != 0 {
			if closed != code {
				t.Fatalf("closed with %d, want %d", closed, code)
			}
			return
		}
	}
}

var both = []string{api.SubprotocolJSON, api.SubprotocolMsgpack}

func protoName(p string) string { return strings.TrimPrefix(p, "ballet.v1.") }
