package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestRPCCloseCodes(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) {
		c.RPCHeartbeat = 400 * time.Millisecond // a loaded machine must not miss three
		c.RPCAuthTimeout = 2 * time.Second
		c.RPCMaxFrameBytes = 4096
	})
	// keepAlive sends $/heartbeat notifications until done closes.
	keepAlive := func(c *rawConn, done chan struct{}) {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				b, mt := c.encode(map[string]any{"jsonrpc": "2.0", "method": "$/heartbeat", "params": map[string]any{"time": "now"}})
				if c.write(mt, b) != nil {
					return
				}
			}
		}
	}
	tests := []struct {
		name  string
		run   func(t *testing.T, c *rawConn)
		close int
	}{
		{"no valid auth in time", func(t *testing.T, c *rawConn) {
			done := make(chan struct{})
			t.Cleanup(func() { close(done) })
			go keepAlive(c, done)
			expectErr(t, c.call(t, 1, "auth", map[string]any{"token": "bpt_wrong"}), api.RPCUnauthenticated, "invalid token")
		}, api.CloseUnauthorized},
		{"silent client", func(t *testing.T, c *rawConn) {
			c.ws.SetPingHandler(func(string) error { return nil }) // answer no ping either
			c.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]})
		}, api.CloseHeartbeat},
		{"frame over the limit", func(t *testing.T, c *rawConn) {
			c.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]})
			c.send(t, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "system.ping", "params": map[string]any{"pad": strings.Repeat("x", 5000)}})
		}, api.CloseTooBig},
	}
	for _, proto := range both {
		for _, tt := range tests {
			t.Run(protoName(proto)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				c := e.mustRaw(t, proto)
				tt.run(t, c)
				c.expectClose(t, tt.close)
			})
		}
	}
	t.Run("no subprotocol", func(t *testing.T) {
		t.Parallel()
		c, _, err := e.dialRaw(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.expectClose(t, api.ClosePolicy)
	})
	// Subprotocols of which we speak none are refused in the handshake,
	// where a standard client sees the answer; one of ours among them is
	// chosen.
	t.Run("unknown subprotocols", func(t *testing.T) {
		t.Parallel()
		_, res, err := e.dialRaw(t, nil, "ballet.v2.json", "graphql-ws")
		if err == nil || res == nil || res.StatusCode != http.StatusBadRequest {
			t.Fatalf("dial: %v, response %+v; want a 400 handshake", err, res)
		}
		b, _ := io.ReadAll(res.Body)
		if want := `Sec-WebSocket-Protocol: none of \"ballet.v2.json\", \"graphql-ws\" is spoken here; offer ballet.v1.json or ballet.v1.msgpack`; !strings.Contains(string(b), want) {
			t.Fatalf("body %s, want %s", b, want)
		}
		c, _, err := e.dialRaw(t, nil, "ballet.v2.json", api.SubprotocolMsgpack)
		if err != nil || c.proto != api.SubprotocolMsgpack {
			t.Fatalf("dial with one of ours among others: %v", err)
		}
	})
	t.Run("heartbeats keep a socket open", func(t *testing.T) {
		t.Parallel()
		c := e.mustRaw(t, api.SubprotocolJSON)
		c.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]})
		done := make(chan struct{})
		defer close(done)
		go keepAlive(c, done)
		// The server's own heartbeats arrive meanwhile; after more than
		// three intervals the socket still answers.
		beats := 0
		for beats < 5 {
			m, closed := c.recv(t)
			if closed != 0 {
				t.Fatalf("closed %d", closed)
			}
			if m["method"] == "$/heartbeat" {
				beats++
			}
		}
		if code, msg := rpcErr(c.call(t, 2, "system.ping", nil)); code != 0 {
			t.Fatalf("ping: %d %s", code, msg)
		}
	})
}

func TestRPCConnectionLimit(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) { c.RPCMaxConnections = 2 })
	first := e.dial(t, rpcclient.JSON, "viewer")
	e.dial(t, rpcclient.Msgpack, "viewer")
	_, res, err := e.dialRaw(t, nil, api.SubprotocolJSON)
	if err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third socket: err %v, response %v; want 503", err, res)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), "server.rpc_max_connections") || res.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal %q (Retry-After %q) does not name the limit", body, res.Header.Get("Retry-After"))
	}
	_ = first.Close()
	storetest.WaitFor(t, "a freed slot taken again", func() bool {
		c, _, err := e.dialRaw(t, nil, api.SubprotocolJSON)
		if err != nil {
			return false
		}
		_ = c.ws.Close()
		return true
	})
}

func TestRPCOrigins(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) { c.RPCAllowedOrigins = []string{"https://app.example.com"} })
	self := "http://" + e.srv.Addr()
	tests := []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{self, true},
		{"https://app.example.com", true},
		{"https://evil.example.com", false},
		{"http://localhost:1", false},
		{"null", false},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			c, res, err := e.dialRaw(t, h, api.SubprotocolJSON)
			if tt.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				_ = c.ws.Close()
				return
			}
			if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
				t.Fatalf("err %v, response %v; want 403", err, res)
			}
			body, _ := io.ReadAll(res.Body)
			if !strings.Contains(string(body), "server.rpc_allowed_origins") {
				t.Fatalf("refusal %q does not name server.rpc_allowed_origins", body)
			}
		})
	}
}

func TestRPCRateLimit(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) { c.RPCRequestsPerSecond = 1; c.RPCRequestBurst = 4 })
	c := e.mustRaw(t, api.SubprotocolJSON)
	c.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]}) // takes one token
	ok, limited := 0, 0
	for i := range 6 {
		r := c.call(t, 10+i, "system.ping", nil)
		switch code, msg := rpcErr(r); {
		case code == 0:
			ok++
		case code == api.RPCInvalidRequest && strings.Contains(msg, "server.rpc_requests_per_second"):
			limited++
		default:
			t.Fatalf("ping %d: %d %s", i, code, msg)
		}
	}
	if ok < 3 || limited < 2 || ok+limited != 6 {
		t.Fatalf("%d answered, %d limited; want the burst answered and the rest refused", ok, limited)
	}
}

func TestRPCShutdownClosesGoingAway(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	clients := []*rpcclient.Client{e.dial(t, rpcclient.JSON, "viewer"), e.dial(t, rpcclient.Msgpack, "engineer")}
	raw := e.mustRaw(t, api.SubprotocolJSON) // not yet authenticated
	e.stop()
	for _, c := range clients {
		select {
		case <-c.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("socket still open after shutdown")
		}
		var ce *rpcclient.CloseError
		if err := c.Err(); !asClose(err, &ce) || ce.Code != api.CloseGoingAway {
			t.Fatalf("closed with %v, want 1001", err)
		}
	}
	raw.expectClose(t, api.CloseGoingAway)
}

func asClose(err error, target **rpcclient.CloseError) bool { return errors.As(err, target) }

func asRPC(err error, target **rpcclient.Error) bool { return errors.As(err, target) }

func TestRPCNotAWebsocket(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	r := e.do("GET", "/rpc", "", nil).expect(t, http.StatusBadRequest)
	if !strings.Contains(r.message(), "websocket") {
		t.Fatalf("message %q", r.message())
	}
}

func TestRPCConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*api.Config)
		want string
	}{
		{"origin path", func(c *api.Config) { c.RPCAllowedOrigins = []string{"https://a.example.com/app"} }, "server.rpc_allowed_origins"},
		{"origin scheme", func(c *api.Config) { c.RPCAllowedOrigins = []string{"app.example.com"} }, "server.rpc_allowed_origins"},
		{"negative connections", func(c *api.Config) { c.RPCMaxConnections = -1 }, "server.rpc_max_connections"},
		{"tiny frames", func(c *api.Config) { c.RPCMaxFrameBytes = 10 }, "server.rpc_max_frame_bytes"},
		{"negative heartbeat", func(c *api.Config) { c.RPCHeartbeat = -time.Second }, "server.rpc_heartbeat"},
		{"negative auth timeout", func(c *api.Config) { c.RPCAuthTimeout = -time.Second }, "server.rpc_auth_timeout"},
		{"negative write timeout", func(c *api.Config) { c.RPCWriteTimeout = -time.Second }, "server.rpc_write_timeout"},
		{"negative rate", func(c *api.Config) { c.RPCRequestsPerSecond = -1 }, "server.rpc_requests_per_second"},
	}
	for _, tt := range tests {
		cfg := api.DefaultConfig()
		tt.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
		}
	}
	cfg := api.DefaultConfig()
	cfg.RPCAllowedOrigins = []string{"https://app.example.com", "*"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid origins refused: %v", err)
	}
}

// TestRPCClient is the client package against the server: calls, server
// heartbeats as notifications, errors as *rpcclient.Error.
func TestRPCClient(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) { c.RPCHeartbeat = 300 * time.Millisecond })
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := rpcclient.Dial(ctx, e.url(), proto, e.tokens["engineer"], &rpcclient.Options{Heartbeat: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Auth.Subject != "engineer@example.com" {
				t.Fatalf("auth %+v", c.Auth)
			}
			var sent struct {
				Seq      int64  `json:"seq"`
				Turn     string `json:"turn"`
				Position int64  `json:"position"`
			}
			if err := c.Call(ctx, "planner.send", map[string]any{"session": e.session, "text": "hi"}, &sent); err != nil {
				t.Fatal(err)
			}
			if sent.Seq < 1 || sent.Turn == "" {
				t.Fatalf("send %+v", sent)
			}
			var rerr *rpcclient.Error
			err = c.Call(ctx, "planner.send", map[string]any{"session": e.session}, nil)
			if !asRPC(err, &rerr) || rerr.Code != api.RPCInvalidParams || !strings.Contains(rerr.Message, "text") {
				t.Fatalf("blank send: %v", err)
			}
			if err := c.Call(ctx, "planner.cancel", map[string]any{"session": e.session, "turn": sent.Turn}, nil); err != nil {
				t.Fatal(err)
			}
			// Heartbeats flow both ways, and keep the socket open past
			// three intervals.
			for beats := 0; beats < 5; {
				select {
				case n := <-c.Notifications():
					if n.Method == "$/heartbeat" {
						var p struct {
							Time string `json:"time"`
						}
						if err := c.Decode(n.Params, &p); err != nil || p.Time == "" {
							t.Fatalf("heartbeat params %v: %v", p, err)
						}
						beats++
					}
				case <-ctx.Done():
					t.Fatal("no heartbeats")
				}
			}
			if err := c.Call(ctx, "system.ping", nil, nil); err != nil {
				t.Fatalf("ping after heartbeats: %v", err)
			}
		})
	}
	t.Run("bad token", func(t *testing.T) {
		t.Parallel()
		_, err := rpcclient.Dial(context.Background(), e.url(), rpcclient.JSON, "bpt_wrong", nil)
		var rerr *rpcclient.Error
		if !asRPC(err, &rerr) || rerr.Code != api.RPCUnauthenticated {
			t.Fatalf("dial with a bad token: %v", err)
		}
	})
}

// TestRPCWatch follows a turn through planner.watch: the stored queued
// output replayed from cursor 0, then the done of its cancel, live; a
// subscription name is unique per connection.
func TestRPCWatch(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sess := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": proto}).expect(t, 201).Body["id"].(string)
			c := e.dial(t, proto, "engineer")
			var sent struct {
				Turn string `json:"turn"`
			}
			if err := c.Call(ctx, "planner.send", map[string]any{"session": sess, "text": "hi"}, &sent); err != nil {
				t.Fatal(err)
			}
			var w struct {
				Subscription string `json:"subscription"`
				Running      bool   `json:"running"`
			}
			if err := c.Call(ctx, "planner.watch", map[string]any{"subscription": "w1", "session": sess, "from_cursor": 0}, &w); err != nil {
				t.Fatal(err)
			}
			if w.Subscription != "w1" {
				t.Fatalf("watch %+v", w)
			}
			var rerr *rpcclient.Error
			if err := c.Call(ctx, "planner.watch", map[string]any{"subscription": "w1", "session": sess}, nil); !asRPC(err, &rerr) || rerr.Code != api.RPCConflict {
				t.Fatalf("second watch w1: %v, want -32009", err)
			}
			type output struct {
				Subscription string `json:"subscription"`
				Session      string `json:"session"`
				Turn         string `json:"turn"`
				Type         string `json:"type"`
				Text         string `json:"text"`
				Cursor       int64  `json:"cursor"`
			}
			next := func() output {
				t.Helper()
				for {
					select {
					case n := <-c.Notifications():
						if n.Method != "planner.output" {
							continue
						}
						var o output
						if err := c.Decode(n.Params, &o); err != nil {
							t.Fatal(err)
						}
						return o
					case <-ctx.Done():
						t.Fatal("no planner.output")
					}
				}
			}
			if o := next(); o.Type != "queued" || o.Cursor != 1 || o.Subscription != "w1" || o.Session != sess || o.Turn != sent.Turn {
				t.Fatalf("first output %+v", o)
			}
			if err := c.Call(ctx, "planner.cancel", map[string]any{"session": sess}, nil); err != nil {
				t.Fatal(err)
			}
			if o := next(); o.Type != "done" || o.Text != "cancelled" || o.Cursor != 2 {
				t.Fatalf("after cancel %+v", o)
			}
		})
	}
}
