package fakellm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one request the fake received, kept for tests to inspect.
type Request struct {
	Path   string
	Header http.Header
	Body   []byte
}

// Server serves a script over HTTP: POST /v1/messages and
// /v1/messages/count_tokens (Anthropic), POST /v1/chat/completions or
// /chat/completions and POST /v1/embeddings or /embeddings (OpenAI).
type Server struct {
	script *Script
	next   atomic.Int64
	ids    atomic.Int64
	active atomic.Int64

	embedFails      atomic.Int64 // embeddings calls still to fail
	embedFailStatus atomic.Int64

	mu       sync.Mutex
	requests []Request

	cache promptCache // cache.go

	srv *http.Server
	ln  net.Listener
}

// maxKept bounds the requests a server keeps for inspection.
const maxKept = 1000

// New returns a server for the script; call Start, or mount Handler.
func New(script *Script) *Server {
	s := &Server{script: script}
	if e := script.Embeddings; e != nil && e.FailFirst > 0 {
		s.FailEmbeddings(e.FailFirst, e.Status)
	}
	return s
}

// Start listens on a free loopback port and serves in the background.
func (s *Server) Start() error { return s.StartOn("127.0.0.1:0") }

// StartOn listens on addr (host:port; port 0 picks a free one) and serves
// in the background.
func (s *Server) StartOn(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fakellm: start: %w", err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on Close
	return nil
}

// URL is the base URL of a started server, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Close stops a started server at once, dropping open connections.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.Close()
	}
}

// Requests returns the requests received so far (the latest 1000).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Serve serves the script on ln until ctx ends, then shuts down within
// 5 s: the body of `ballet fake-llm`.
func Serve(ctx context.Context, ln net.Listener, script *Script) error {
	s := New(script)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	slog.InfoContext(ctx, "fake llm listening", slog.String("addr", ln.Addr().String()), slog.String("script", script.Name))
	select {
	case err := <-errc:
		return fmt.Errorf("fakellm: serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("fakellm: shutdown: %w", err)
		}
		return nil
	}
}

// Handler returns the HTTP handler of the fake.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.serveAnthropic)
	mux.HandleFunc("POST /v1/chat/completions", s.serveOpenAI)
	mux.HandleFunc("POST /chat/completions", s.serveOpenAI)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.serveCountTokens)
	mux.HandleFunc("POST /v1/embeddings", s.serveEmbeddings)
	mux.HandleFunc("POST /embeddings", s.serveEmbeddings)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.active.Add(1)
		defer s.active.Add(-1)
		mux.ServeHTTP(w, r)
	})
}

// Active is how many requests are being answered right now.
func (s *Server) Active() int64 { return s.active.Load() }

func (s *Server) record(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if len(s.requests) >= maxKept {
		s.requests = s.requests[1:]
	}
	s.requests = append(s.requests, Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
	return body, nil
}

// pick chooses the answer for a request whose last user message is text.
func (s *Server) pick(text string) (*Answer, error) {
	var ordered []*Answer
	for i := range s.script.Answers {
		a := &s.script.Answers[i]
		if a.re == nil {
			ordered = append(ordered, a)
			continue
		}
		if a.re.MatchString(text) {
			return a, nil
		}
	}
	if len(ordered) == 0 {
		return nil, errors.New("no answer of the script matches the last user message")
	}
	n := s.next.Add(1) - 1
	if n >= int64(len(ordered)) {
		if !s.script.Loop {
			return nil, fmt.Errorf("the script's %d ordered answers are used up", len(ordered))
		}
		n %= int64(len(ordered))
	}
	return ordered[n], nil
}

func (s *Server) id(prefix string) string {
	return fmt.Sprintf("%s_fake%06d", prefix, s.ids.Add(1))
}

// usage is the usage figures of an answer for a request body.
func (a *Answer) usage(reqBody []byte) Usage {
	if a.Usage != nil {
		return *a.Usage
	}
	out := 0
	for _, b := range a.Content {
		out += len(b.Text)
		if b.ToolUse != nil {
			in, _ := json.Marshal(b.ToolUse.Input)
			out += len(b.ToolUse.Name) + len(in)
		}
	}
	return Usage{InputTokens: int64(len(reqBody)+3) / 4, OutputTokens: int64(out+3) / 4}
}

// wait sleeps d or until ctx ends, reporting whether to go on.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pacer paces one reply's streamed deltas: ChunkLatency before each, and
// the answer's hold before the one after HoldAfter.
type pacer struct {
	a    *Answer
	sent int
}

// next waits before a delta; false means the request ended meanwhile.
func (p *pacer) next(ctx context.Context) bool {
	if p.a.HoldUntil != "" && p.sent == p.a.HoldAfter && !holdUntil(ctx, p.a.HoldUntil) {
		return false
	}
	p.sent++
	return wait(ctx, p.a.ChunkLatency)
}

// holdUntil waits until a file exists at path or ctx ends.
func holdUntil(ctx context.Context, path string) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
}

// hangUp drops the connection without finishing the response.
func hangUp(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// toolNames maps tool call ids to names over a conversation.
type toolNames map[string]string

// matchText renders a user message for matching: its text, with each tool
// result as "[tool_result <name>] <text>".
func matchText(parts []string) string { return strings.Join(parts, "\n") }

func jsonMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
