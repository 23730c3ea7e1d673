package api_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
)

// rpcCase is one frame sent on a fresh socket and what it must answer.
type rpcCase struct {
	name string
	as   string // authenticate as this token holder first ("" stays unauthenticated)
	// method and params build the request (id 7); frame, when set per
	// subprotocol, is sent instead.
	method string
	params map[string]any
	frame  map[string]any // subprotocol → raw frame ([]byte) or a value to encode
	code   int64          // expected error code; 0 expects a result
	msg    string         // substring of the error message
	nullID bool           // the error answers id null
	check  func(t *testing.T, e *rpcEnv, result map[string]any)
}

func TestRPCConformance(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	other := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "admin", map[string]any{"title": "other"}).expect(t, 201)
	_ = other
	keys := func(want ...string) func(*testing.T, *rpcEnv, map[string]any) {
		return func(t *testing.T, _ *rpcEnv, r map[string]any) {
			t.Helper()
			for _, k := range want {
				if _, ok := r[k]; !ok {
					t.Fatalf("result %v has no %q", r, k)
				}
			}
		}
	}
	sess := func(extra map[string]any) map[string]any {
		m := map[string]any{"session": e.session}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []rpcCase{
		// authentication
		{name: "auth", method: "auth", params: map[string]any{"token": e.tokens["engineer"]}, check: func(t *testing.T, _ *rpcEnv, r map[string]any) {
			if r["subject"] != "engineer@example.com" {
				t.Fatalf("subject %v", r["subject"])
			}
			if v, ok := r["expires_at"]; !ok || v != nil {
				t.Fatalf("expires_at %v (present %v), want null for an API token", v, ok)
			}
		}},
		{name: "auth bad token", method: "auth", params: map[string]any{"token": "bpt_nope"}, code: api.RPCUnauthenticated, msg: "invalid token"},
		{name: "auth no token", method: "auth", params: map[string]any{}, code: api.RPCInvalidParams, msg: "token: required"},
		{name: "auth unknown field", method: "auth", params: map[string]any{"tokn": "x"}, code: api.RPCInvalidParams, msg: `unknown field "tokn"`},
		{name: "auth wrong type", method: "auth", params: map[string]any{"token": 5}, code: api.RPCInvalidParams, msg: "field token: must be a string"},
		{name: "auth twice", as: "engineer", method: "auth", params: map[string]any{"token": e.tokens["engineer"]}, code: api.RPCInvalidParams, msg: "already authenticated"},
		{name: "refresh before auth", method: "auth.refresh", params: map[string]any{"token": e.tokens["engineer"]}, code: api.RPCUnauthenticated, msg: "send auth"},
		{name: "refresh same subject", as: "engineer", method: "auth.refresh", params: map[string]any{"token": e.tokens["engineer"]}, check: keys("subject", "expires_at")},
		{name: "refresh other subject", as: "engineer", method: "auth.refresh", params: map[string]any{"token": e.tokens["viewer"]}, code: api.RPCForbidden, msg: "keep the subject"},
		{name: "ping before auth", method: "system.ping", code: api.RPCUnauthenticated, msg: "send auth"},
		{name: "send before auth", method: "planner.send", params: sess(map[string]any{"text": "hi"}), code: api.RPCUnauthenticated, msg: "send auth"},
		{name: "unknown method before auth", method: "no.such", code: api.RPCUnauthenticated, msg: "send auth"},
		// system
		{name: "ping", as: "viewer", method: "system.ping", check: func(t *testing.T, _ *rpcEnv, r map[string]any) {
			if r["subject"] != "viewer@example.com" || r["time"] == "" {
				t.Fatalf("ping %v", r)
			}
		}},
		{name: "ping with params", as: "viewer", method: "system.ping", params: map[string]any{"x": 1}, code: api.RPCInvalidParams, msg: `unknown field "x"`},
		{name: "heartbeat as request", as: "viewer", method: "$/heartbeat", params: map[string]any{"time": "2026-01-01T00:00:00Z"}, check: keys()},
		{name: "unknown method", as: "viewer", method: "no.such", code: api.RPCMethodNotFound, msg: `"no.such"`},
		{name: "watch", as: "viewer", method: "planner.watch", params: map[string]any{"subscription": "s", "session": e.session}, check: func(t *testing.T, _ *rpcEnv, r map[string]any) {
			if r["subscription"] != "s" || r["running"] != false {
				t.Fatalf("watch %v", r)
			}
		}},
		{name: "watch no subscription", as: "viewer", method: "planner.watch", params: map[string]any{"session": e.session}, code: api.RPCInvalidParams, msg: "subscription: required"},
		{name: "watch no session", as: "viewer", method: "planner.watch", params: map[string]any{"subscription": "s"}, code: api.RPCInvalidParams, msg: "session: required"},
		{name: "watch negative cursor", as: "viewer", method: "planner.watch", params: map[string]any{"subscription": "s", "session": e.session, "from_cursor": -1}, code: api.RPCInvalidParams, msg: "from_cursor"},
		{name: "watch as outsider", as: "outsider", method: "planner.watch", params: map[string]any{"subscription": "s", "session": e.session}, code: api.RPCNotFound},
		// event streams
		{name: "subscribe", as: "viewer", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "project:WEB"}, check: func(t *testing.T, _ *rpcEnv, r map[string]any) {
			if r["subscription"] != "s" || num(r["seq"]) < 1 {
				t.Fatalf("subscribe %v", r)
			}
		}},
		{name: "subscribe before auth", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "project:WEB"}, code: api.RPCUnauthenticated, msg: "send auth"},
		{name: "subscribe no subscription", as: "viewer", method: "stream.subscribe", params: map[string]any{"stream": "project:WEB"}, code: api.RPCInvalidParams, msg: "subscription: required"},
		{name: "subscribe no stream", as: "viewer", method: "stream.subscribe", params: map[string]any{"subscription": "s"}, code: api.RPCInvalidParams, msg: "field stream: required"},
		{name: "subscribe unknown stream", as: "viewer", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "session:" + e.session}, code: api.RPCInvalidParams, msg: "is not a stream: use project:<KEY> or item:<KEY>"},
		{name: "subscribe missing key", as: "viewer", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "item:"}, code: api.RPCInvalidParams, msg: "names no item key"},
		{name: "subscribe bad from_seq", as: "viewer", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "project:WEB", "from_seq": -1}, code: api.RPCInvalidParams, msg: "from_seq: must be a non-negative integer"},
		{name: "subscribe from_seq wrong type", as: "viewer", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "project:WEB", "from_seq": "1"}, code: api.RPCInvalidParams, msg: "field from_seq"},
		{name: "subscribe other organization", as: "engineer", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "project:GLX"}, code: api.RPCNotFound, msg: "project GLX not found"},
		{name: "subscribe as outsider", as: "outsider", method: "stream.subscribe", params: map[string]any{"subscription": "s", "stream": "project:WEB"}, code: api.RPCNotFound, msg: "project WEB not found"},
		{name: "unsubscribe unknown", as: "viewer", method: "stream.unsubscribe", params: map[string]any{"subscription": "nope"}, code: api.RPCNotFound, msg: `subscription "nope" not found`},
		{name: "unsubscribe no subscription", as: "viewer", method: "stream.unsubscribe", code: api.RPCInvalidParams, msg: "subscription: required"},
		// planner
		{name: "send", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "hello"}), check: keys("seq", "turn", "position")},
		{name: "send with turn id", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "hello", "turn": "7b0c4a53-5e0e-4c1a-9d57-0e1f6d1c2b3a"}),
			check: func(t *testing.T, _ *rpcEnv, r map[string]any) {
				if r["turn"] != "7b0c4a53-5e0e-4c1a-9d57-0e1f6d1c2b3a" {
					t.Fatalf("turn %v", r["turn"])
				}
			}},
		{name: "send with trace context", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "hello",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=abc"}), check: keys("seq", "turn", "position")},
		{name: "send bad traceparent", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x", "traceparent": "00-xyz-01"}),
			code: api.RPCInvalidParams, msg: "field traceparent: must be a W3C traceparent 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"},
		{name: "send zero trace id", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x",
			"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}), code: api.RPCInvalidParams, msg: "ids not all zero"},
		{name: "send zero parent id", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}), code: api.RPCInvalidParams, msg: "ids not all zero"},
		{name: "send tracestate alone", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x", "tracestate": "a=b"}),
			code: api.RPCInvalidParams, msg: "field tracestate: given without traceparent"},
		{name: "send long tracestate", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "a=" + strings.Repeat("b", 511)}),
			code: api.RPCInvalidParams, msg: "field tracestate: at most 512 bytes, got 513"},
		{name: "send no session", as: "engineer", method: "planner.send", params: map[string]any{"text": "hi"}, code: api.RPCInvalidParams, msg: "session: required"},
		{name: "send unknown session", as: "engineer", method: "planner.send", params: map[string]any{"session": "00000000-0000-0000-0000-000000000000", "text": "hi"}, code: api.RPCNotFound},
		{name: "send blank", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "  "}), code: api.RPCInvalidParams, msg: "text: must not be blank"},
		{name: "send bad turn", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x", "turn": ""}), code: api.RPCInvalidParams, msg: "turn: must be 1-255 printable ASCII characters, got an empty string"},
		{name: "send long turn", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x", "turn": strings.Repeat("k", 256)}), code: api.RPCInvalidParams, msg: "got 256 bytes"},
		{name: "send bad multitask", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x", "multitask": "later"}), code: api.RPCInvalidParams, msg: `multitask: must be "enqueue", "reject" or "interrupt", got "later"`},
		{name: "send NUL", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "a\x00b"}), code: api.RPCInvalidParams, msg: "field text: must not contain NUL"},
		{name: "send wrong type", as: "engineer", method: "planner.send", params: map[string]any{"session": 5, "text": "x"}, code: api.RPCInvalidParams, msg: "field session: must be a string"},
		{name: "send unknown field", as: "engineer", method: "planner.send", params: sess(map[string]any{"text": "x", "txt": "y"}), code: api.RPCInvalidParams, msg: `unknown field "txt"`},
		{name: "send as viewer", as: "viewer", method: "planner.send", params: sess(map[string]any{"text": "hi"}), code: api.RPCForbidden},
		{name: "send as outsider", as: "outsider", method: "planner.send", params: sess(map[string]any{"text": "hi"}), code: api.RPCNotFound},
		{name: "cancel", as: "engineer", method: "planner.cancel", params: sess(nil), check: keys()},
		{name: "cancel unknown session", as: "engineer", method: "planner.cancel", params: map[string]any{"session": "00000000-0000-0000-0000-000000000000"}, code: api.RPCNotFound},
		{name: "cancel no session", as: "engineer", method: "planner.cancel", code: api.RPCInvalidParams, msg: "session: required"},
		// envelope
		{name: "params array", as: "viewer", frame: both2(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "system.ping", "params": []any{1}}), code: api.RPCInvalidRequest, msg: "params must be an object"},
		{name: "string id", as: "viewer", frame: both2(map[string]any{"jsonrpc": "2.0", "id": "7", "method": "system.ping"}), code: api.RPCInvalidRequest, msg: "id must be an integer", nullID: true},
		{name: "fractional id", as: "viewer", frame: both2(map[string]any{"jsonrpc": "2.0", "id": 7.5, "method": "system.ping"}), code: api.RPCInvalidRequest, msg: "id must be an integer", nullID: true},
		{name: "wrong version", as: "viewer", frame: both2(map[string]any{"jsonrpc": "1.0", "id": 7, "method": "system.ping"}), code: api.RPCInvalidRequest, msg: `jsonrpc must be "2.0"`},
		{name: "no method", as: "viewer", frame: both2(map[string]any{"jsonrpc": "2.0", "id": 7}), code: api.RPCInvalidRequest, msg: "method is required"},
		{name: "unknown member", as: "viewer", frame: both2(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "system.ping", "extra": 1}), code: api.RPCInvalidRequest, msg: `unknown field "extra"`},
		{name: "not an object", as: "viewer", frame: both2("ping"), code: api.RPCInvalidRequest, msg: "expected a JSON object", nullID: true},
		{name: "parse error", as: "viewer", frame: map[string]any{api.SubprotocolJSON: []byte(`{"jsonrpc":`), api.SubprotocolMsgpack: []byte{0xc1}}, code: api.RPCParseError, msg: "parse error", nullID: true},
		{name: "duplicate key", as: "viewer", frame: map[string]any{api.SubprotocolJSON: []byte(`{"jsonrpc":"2.0","id":7,"method":"system.ping","method":"x"}`),
			api.SubprotocolMsgpack: dupMsgpack()}, code: api.RPCInvalidRequest, msg: `duplicate field "method"`},
		{name: "batch", as: "viewer", frame: both2([]any{map[string]any{"jsonrpc": "2.0", "id": 7, "method": "system.ping"}}), code: api.RPCInvalidRequest, msg: "batches are not supported", nullID: true},
	}
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					c := e.mustRaw(t, proto)
					if tc.as != "" {
						r := c.call(t, 1, "auth", map[string]any{"token": e.tokens[tc.as]})
						if code, msg := rpcErr(r); code != 0 {
							t.Fatalf("auth as %s: %d %s", tc.as, code, msg)
						}
					}
					if tc.frame != nil {
						c.send(t, tc.frame[proto])
					} else {
						msg := map[string]any{"jsonrpc": "2.0", "id": 7, "method": tc.method}
						if tc.params != nil {
							msg["params"] = tc.params
						}
						c.send(t, msg)
					}
					r, closed := c.reply(t)
					if closed != 0 {
						t.Fatalf("closed %d instead of a reply", closed)
					}
					if tc.nullID {
						if v, ok := r["id"]; !ok || v != nil {
							t.Fatalf("id %v, want null", r["id"])
						}
					} else if num(r["id"]) != 7 {
						t.Fatalf("id %v, want 7; reply %v", r["id"], r)
					}
					if tc.code != 0 {
						expectErr(t, r, tc.code, tc.msg)
						return
					}
					if code, msg := rpcErr(r); code != 0 {
						t.Fatalf("error %d %s", code, msg)
					}
					res, ok := r["result"].(map[string]any)
					if !ok {
						t.Fatalf("result %v is not an object", r["result"])
					}
					if tc.check != nil {
						tc.check(t, e, res)
					}
					// The socket is still usable after every reply.
					if code, msg := rpcErr(c.call(t, 8, "system.ping", nil)); tc.as != "" && code != 0 {
						t.Fatalf("ping after: %d %s", code, msg)
					}
				})
			}
		})
	}
}

// both2 is the same frame value for both subprotocols.
func both2(v any) map[string]any {
	return map[string]any{api.SubprotocolJSON: v, api.SubprotocolMsgpack: v}
}

// dupMsgpack is a MessagePack request that gives "method" twice.
func dupMsgpack() []byte {
	var b bytes.Buffer
	enc := msgpack.NewEncoder(&b)
	_ = enc.EncodeMapLen(4)
	for _, kv := range [][2]any{{"jsonrpc", "2.0"}, {"id", 7}, {"method", "system.ping"}, {"method", "x"}} {
		_ = enc.EncodeString(kv[0].(string))
		_ = enc.Encode(kv[1])
	}
	return b.Bytes()
}

// TestRPCErrorTable covers the codes no method of this socket reaches
// from a test (conflict, internal): every store code maps once.
func TestRPCErrorTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		code int
	}{
		{store.Errorf(store.CodeInvalid, "x"), api.RPCInvalidParams},
		{store.Errorf(store.CodeUnauthenticated, "x"), api.RPCUnauthenticated},
		{store.Errorf(store.CodeForbidden, "x"), api.RPCForbidden},
		{store.Errorf(store.CodeNotFound, "x"), api.RPCNotFound},
		{store.Errorf(store.CodeConflict, "x"), api.RPCConflict},
		{store.Errorf(store.CodeAlreadyExists, "x"), api.RPCConflict},
		{store.Errorf(store.CodeExhausted, "x"), api.RPCInternal},
		{store.Errorf(store.CodeResyncRequired, "x"), api.RPCResyncRequired},
		{errors.New("boom"), api.RPCInternal},
	}
	for _, tt := range tests {
		if got := api.RPCErrorOf(tt.err).Code; got != tt.code {
			t.Errorf("%v: code %d, want %d", tt.err, got, tt.code)
		}
	}
}
