package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// queryCounter is a pgx tracer that counts the statements sent to Postgres
// on behalf of each request, by the request id its context carries (the
// access log's, from X-Request-Id).
type queryCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (q *queryCounter) add(ctx context.Context) {
	id := requestid.From(ctx)
	if id == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n[id]++
}

// of is how many statements the request with id sent.
func (q *queryCounter) of(id string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n[id]
}

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.add(ctx)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (q *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	q.add(ctx)
	return ctx
}

func (q *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (q *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// limitEnv is an api with the given auth and server settings on a database
// of its own whose statements are counted per request, logging JSON at
// info. It has no tokens; tests make their own.
type limitEnv struct {
	*env
	queries *queryCounter
	logs    *logBuffer
}

func newLimitEnv(t *testing.T, auth api.AuthConfig, edit func(*api.Config)) *limitEnv {
	t.Helper()
	ctx := context.Background()
	q := &queryCounter{n: map[string]int{}}
	dcfg := store.DefaultConfig()
	dcfg.URL, dcfg.Migrate, dcfg.Tracer, dcfg.MaxConns = storetest.URL(t), false, q, 4
	db, err := store.Open(ctx, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	rdb, _ := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	if edit != nil {
		edit(&cfg)
	}
	logs := &logBuffer{}
	srv, err := api.New(cfg, auth, api.Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test",
		Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &limitEnv{env: &env{srv: srv, db: db, tokens: map[string]string{}}, queries: q, logs: logs}
}

// token makes a valid API token of a new subject.
func (e *limitEnv) token(t *testing.T, subject string) string {
	t.Helper()
	tok, _, err := e.db.CreateAPIToken(context.Background(), subject, "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so that one test can be several client addresses.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// call is one GET /api/v1/tokens of a test of the failed-authentication
// limit.
type call struct {
	from  string // the loopback address it comes from; "" is 127.0.0.1
	token string // the bearer token
	xff   string // X-Forwarded-For, a header line per \n; "" sends none
	id    string // X-Request-Id; "" sends none
}

// get sends c and returns the reply and its Retry-After.
func (e *limitEnv) get(t *testing.T, c call) (response, string) {
	t.Helper()
	if c.from == "" {
		c.from = "127.0.0.1"
	}
	req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+"/api/v1/tokens", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.xff != "" {
		req.Header["X-Forwarded-For"] = strings.Split(c.xff, "\n")
	}
	if c.id != "" {
		req.Header.Set(requestid.Header, c.id)
	}
	res, err := clientFrom(c.from).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{Status: res.StatusCode, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r, res.Header.Get("Retry-After")
}

// rpcAuth opens /rpc from the loopback address from (X-Forwarded-For xff
// when set, as call's) and answers its auth {token}. The socket stays open until the
// test ends.
func (e *limitEnv) rpcAuth(t *testing.T, from, xff, token string) map[string]any {
	t.Helper()
	nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	d := websocket.Dialer{NetDialContext: nd.DialContext, Subprotocols: []string{api.SubprotocolJSON}, HandshakeTimeout: 10 * time.Second}
	h := http.Header{}
	if xff != "" {
		h["X-Forwarded-For"] = strings.Split(xff, "\n")
	}
	ws, _, err := d.Dial("ws://"+e.srv.Addr()+"/rpc", h)
	if err != nil {
		t.Fatalf("dial /rpc from %s: %v", from, err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	c := &rawConn{ws: ws, proto: ws.Subprotocol()}
	return c.call(t, 1, "auth", map[string]any{"token": token})
}

// rpcErrData is the data of a reply's error.
func rpcErrData(m map[string]any) map[string]any {
	e, _ := m["error"].(map[string]any)
	d, _ := e["data"].(map[string]any)
	return d
}
