package api_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// frameSeeds are frames of every shape a client can get wrong.
var frameSeeds = []string{
	``, ` `, `{`, `}`, `[]`, `[{}]`, `null`, `0`, `"x"`, `{}`, `{"jsonrpc":"2.0"}`,
	`{"jsonrpc":"2.0","id":1}`, `{"jsonrpc":"2.0","id":1,"method":""}`, `{"jsonrpc":"2.0","id":1,"method":5}`,
	`{"jsonrpc":"2.0","id":-1,"method":"system.ping","params":[]}`, `{"jsonrpc":"2.0","id":1e3,"method":"x"}`,
	`{"jsonrpc":"2.0","id":99999999999999999999,"method":"x"}`, `{"jsonrpc":"2.0","id":{},"method":"x"}`,
	`{"jsonrpc":"2.0","id":1,"method":"planner.send","params":{"session":"\u0000","text":"x"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"planner.send","params":{"session":"x","session":"y"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"planner.send","params":{"Session":"x"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"auth","params":{"token":["a"]}}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", `{"jsonrpc":"2.0","id":1,"method":"system.ping"} {}`,
	`{"jsonrpc":"2.0","id":1,"method":"system.ping","params":{"a":{"b":{"c":[[[[[[[[[[1]]]]]]]]]]}}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"system.ping","id":2}`, `{"jsonrpc":"2.0","method":"$/heartbeat","params":7}`,
}

// fuzzSocket is one authenticated raw socket shared by fuzz inputs.
type fuzzSocket struct {
	mu   sync.Mutex
	conn *rawConn
	next int
}

// exchange sends frame, then a system.ping marker, and counts the error
// replies that came before the marker's answer. A frame that is a valid
// notification gets none; a request or a bad frame gets exactly one reply.
func (s *fuzzSocket) exchange(t *testing.T, frame []byte) (replies int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	marker := 1_000_000 + s.next
	if err := s.conn.write(1, frame); err != nil {
		t.Fatalf("write frame: %v", err)
	}
	s.conn.send(t, map[string]any{"jsonrpc": "2.0", "id": marker, "method": "system.ping"})
	for {
		m, closed := s.conn.recv(t)
		if closed != 0 {
			t.Fatalf("frame %q closed the socket with %d", frame, closed)
		}
		if _, ok := m["method"]; ok {
			continue // a server heartbeat
		}
		if num(m["id"]) == int64(marker) {
			if code, msg := rpcErr(m); code != 0 {
				t.Fatalf("after frame %q the socket no longer answers: %d %s", frame, code, msg)
			}
			return replies
		}
		replies++
	}
}

func newFuzzSocket(t *testing.T, e *rpcEnv) *fuzzSocket {
	c := e.mustRaw(t, api.SubprotocolJSON)
	c.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]})
	return &fuzzSocket{conn: c}
}

func FuzzRPCFrame(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add([]byte(s))
	}
	// One api and one socket for every input: the fuzz target's own.
	ctx := context.Background()
	db := storetest.New(f)
	rdb, _ := taskstest.New(f)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.RPCRequestsPerSecond, cfg.RPCRequestBurst = 1_000_000, 1_000_000
	cfg.RPCMaxInflight = 1 // replies in request order, so each is counted against its frame
	srv, err := api.New(cfg, api.DefaultAuthConfig(), api.Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test"})
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Stop)
	token, _, err := db.CreateAPIToken(ctx, "fuzz@example.com", "fuzz", 0)
	if err != nil {
		f.Fatal(err)
	}
	d := websocket.Dialer{Subprotocols: []string{api.SubprotocolJSON}}
	ws, _, err := d.Dial("ws://"+srv.Addr()+"/rpc", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ws.Close() })
	sock := &fuzzSocket{conn: &rawConn{ws: ws, proto: api.SubprotocolJSON}}
	var once sync.Once
	f.Fuzz(func(t *testing.T, frame []byte) {
		once.Do(func() { sock.conn.call(t, 1, "auth", map[string]any{"token": token}) })
		if n := sock.exchange(t, frame); n > 1 {
			t.Fatalf("frame %q got %d replies, want at most one", frame, n)
		}
	})
}

// TestRPCRandomFrames sends random mutations of the seeds and random
// bytes: each bad frame gets exactly one error, and the socket keeps
// answering.
func TestRPCRandomFrames(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) {
		c.RPCRequestsPerSecond, c.RPCRequestBurst = 1_000_000, 1_000_000
		c.RPCMaxInflight = 1 // replies in request order, so each is counted against its frame
	})
	sock := newFuzzSocket(t, e)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		var frame []byte
		if i%4 == 0 {
			frame = make([]byte, rng.IntN(64))
			for j := range frame {
				frame[j] = byte(rng.IntN(256))
			}
		} else {
			frame = []byte(frameSeeds[rng.IntN(len(frameSeeds))])
			for range 1 + rng.IntN(3) {
				if len(frame) == 0 {
					break
				}
				const alphabet = "{}[]\":,0a\\ \x00"
				frame[rng.IntN(len(frame))] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		if n := sock.exchange(t, frame); n > 1 {
			t.Fatalf("frame %q got %d replies, want at most one", frame, n)
		}
	}
	// Frames that cannot be requests always get exactly one error.
	for _, frame := range []string{`{`, `[1]`, `"x"`, `{"id":1}`, "\xff"} {
		if n := sock.exchange(t, []byte(frame)); n != 1 {
			t.Fatalf("frame %q got %d replies, want one error", frame, n)
		}
	}
}

// TestRPCManyConnections opens 2,000 sockets on one api, authenticates
// each and has every one answer a ping.
func TestRPCManyConnections(t *testing.T) {
	t.Parallel()
	const n = 2000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 3*n+1024 {
		lim.Cur = min(lim.Max, 3*n+1024)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatalf("raise RLIMIT_NOFILE: %v", err)
		}
	}
	e := newRPCEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := make([]*rpcclient.Client, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			proto := both[i%2]
			c, err := rpcclient.Dial(ctx, e.url(), proto, e.tokens["viewer"], &rpcclient.Options{Heartbeat: -1, Notifications: 4})
			if err != nil {
				errs <- err
				return
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("dial: %v", err)
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	// All open at once: each answers a ping.
	var failed sync.Map
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r struct {
				Subject string `json:"subject"`
			}
			if err := c.Call(ctx, "system.ping", nil, &r); err != nil || r.Subject != "viewer@example.com" {
				failed.Store(i, err)
			}
		}()
	}
	wg.Wait()
	failed.Range(func(k, v any) bool {
		t.Errorf("socket %v: ping: %v", k, v)
		return true
	})
}
