package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store/storetest"
)

// testDirectTransport is the gateway's upstream transport with the given
// header and idle timeouts.
func testDirectTransport(t *testing.T, headerTimeout, idleTimeout time.Duration) *directTransport {
	t.Helper()
	next := http.DefaultTransport.(*http.Transport).Clone()
	next.IdleConnTimeout = idleTimeout
	tr := newDirectTransport(next, headerTimeout)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// connCounter counts the connections a test server accepts and closes.
type connCounter struct{ opened, closed atomic.Int64 }

func (c *connCounter) track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.opened.Add(1)
	case http.StateClosed, http.StateHijacked:
		c.closed.Add(1)
	}
}

func countedServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *connCounter) {
	t.Helper()
	var cc connCounter
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = cc.track
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &cc
}

// post sends body to url through tr and reads the whole answer.
func post(t *testing.T, ctx context.Context, tr http.RoundTripper, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return resp.StatusCode, string(b)
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Write(append([]byte("got "), b...)) //nolint:errcheck
}

func TestDirectTransportKeepsConnections(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		// conns is how many connections five calls take.
		conns int64
	}{
		{"length-framed answers reuse one", echo, 1},
		{"chunked answers reuse one", func(w http.ResponseWriter, r *http.Request) {
			echo(w, r)
			w.(http.Flusher).Flush()
			w.Write([]byte(" and more")) //nolint:errcheck
		}, 1},
		{"connection: close takes one each", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			echo(w, r)
		}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, cc := countedServer(t, tt.handler)
			tr := testDirectTransport(t, time.Minute, time.Minute)
			for i := range 5 {
				body := strings.Repeat("x", i)
				if status, got := post(t, context.Background(), tr, srv.URL+"/v1/messages", body); status != 200 || !strings.HasPrefix(got, "got "+body) {
					t.Fatalf("call %d: %d %q", i, status, got)
				}
			}
			if n := cc.opened.Load(); n != tt.conns {
				t.Fatalf("%d connections for five calls, want %d", n, tt.conns)
			}
		})
	}
}

// oneShotServer answers one request per connection, as keep-alive, and
// then closes the connection: what an upstream does whose idle timeout
// ended while the gateway kept the connection. bodies receives each
// request's body; closed each closed connection.
func oneShotServer(t *testing.T) (url string, bodies chan string, closed chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	bodies, closed = make(chan string, 10), make(chan struct{}, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err == nil {
				b, _ := io.ReadAll(req.Body)
				bodies <- string(b)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") //nolint:errcheck
			}
			c.Close()
			closed <- struct{}{}
		}
	}()
	return "http://" + ln.Addr().String(), bodies, closed
}

func TestDirectTransportSendsAgainOnAConnectionTheUpstreamClosed(t *testing.T) {
	t.Parallel()
	url, bodies, closed := oneShotServer(t)
	tr := testDirectTransport(t, time.Minute, time.Minute)
	if status, got := post(t, context.Background(), tr, url, "first"); status != 200 || got != "ok" {
		t.Fatalf("first call: %d %q", status, got)
	}
	receive(t, closed, "the upstream to close the first connection")
	if n := tr.idleConns(); n != 1 {
		t.Fatalf("%d idle connections, want the closed one kept", n)
	}
	if status, got := post(t, context.Background(), tr, url, "second"); status != 200 || got != "ok" {
		t.Fatalf("second call, on the closed connection first: %d %q", status, got)
	}
	if b := receive(t, bodies, "the first body"); b != "first" {
		t.Fatalf("first body %q", b)
	}
	if b := receive(t, bodies, "the second body"); b != "second" {
		t.Fatalf("second body %q, want it sent whole on a new connection", b)
	}
	select {
	case b := <-bodies:
		t.Fatalf("a third request arrived: %q", b)
	default:
	}
}

// receive takes one value from ch, failing t when none comes in time.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(storetest.WaitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// stallingServer sends the head and first chunk of an answer, then waits
// until the test ends.
func stallingServer(t *testing.T) (*httptest.Server, *connCounter) {
	t.Helper()
	release := make(chan struct{})
	srv, cc := countedServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first")) //nolint:errcheck
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	return srv, cc
}

func TestDirectTransportEndsAStalledAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		end  func(cancel context.CancelFunc, body io.Closer)
	}{
		{"the caller's context ends", func(cancel context.CancelFunc, _ io.Closer) { cancel() }},
		{"the body is closed", func(_ context.CancelFunc, body io.Closer) { body.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, cc := stallingServer(t)
			tr := testDirectTransport(t, time.Minute, time.Minute)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
				t.Fatalf("first chunk %q, %v", first, err)
			}
			readErr := make(chan error, 1)
			go func() {
				_, err := resp.Body.Read(make([]byte, 10))
				readErr <- err
			}()
			tt.end(cancel, resp.Body)
			if err := receive(t, readErr, "the stalled read to end"); err == nil {
				t.Fatal("the stalled read ended without an error")
			}
			resp.Body.Close()
			if n := tr.idleConns(); n != 0 {
				t.Fatalf("%d idle connections: a half-read answer's connection was kept", n)
			}
			storetest.WaitFor(t, "the upstream to see the connection closed", func() bool { return cc.closed.Load() == 1 })
		})
	}
}

func TestDirectTransportDropsAHalfReadAnswer(t *testing.T) {
	t.Parallel()
	srv, cc := countedServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("a", 100) + r.URL.Path)) //nolint:errcheck
	})
	tr := testDirectTransport(t, time.Minute, time.Minute)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/one", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); !errors.Is(err, errReadOnClosedBody) {
		t.Fatalf("read after close: %v", err)
	}
	if status, got := post(t, context.Background(), tr, srv.URL+"/two", ""); status != 200 || got != strings.Repeat("a", 100)+"/two" {
		t.Fatalf("next call read %d %q: the first answer's rest was taken for it", status, got)
	}
	if n := cc.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want a new one after the half-read answer", n)
	}
}

func TestDirectTransportTimesOutAwaitingTheHead(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held sync.WaitGroup
	held.Go(func() { // accepts, reads nothing, answers nothing
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c) //nolint:errcheck // until the client gives up
		}
	})
	tr := testDirectTransport(t, 50*time.Millisecond, time.Minute)
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String(), strings.NewReader("x"))
	_, err = tr.RoundTrip(req)
	if !errors.Is(err, errHeaderTimeout) || err.Error() != "timeout awaiting response headers" {
		t.Fatalf("err = %v, want the header timeout", err)
	}
	held.Wait() // the connection was closed: the upstream's read ended
}

func TestDirectTransportClosesIdleConnections(t *testing.T) {
	t.Parallel()
	srv, cc := countedServer(t, echo)
	tr := testDirectTransport(t, time.Minute, 20*time.Millisecond)
	post(t, context.Background(), tr, srv.URL, "x")
	storetest.WaitFor(t, "the idle connection to be closed", func() bool {
		return tr.idleConns() == 0 && cc.closed.Load() == 1
	})
}

// recordingTransport answers every request itself, recording its URL.
type recordingTransport struct {
	mu   sync.Mutex
	urls []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.String())
	r.mu.Unlock()
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("next")), Request: req}, nil
}

func TestDirectTransportLeavesTLSAndProxiesToNetHTTP(t *testing.T) {
	t.Parallel()
	srv, cc := countedServer(t, echo)
	next := &recordingTransport{}
	proxied := "http://" + srv.Listener.Addr().String() + "/via-proxy"
	tr := &directTransport{next: next, idle: map[string][]*directConn{}, dial: (&net.Dialer{}).DialContext,
		proxy: func(r *http.Request) (*url.URL, error) {
			if r.URL.String() == proxied {
				return url.Parse("http://proxy.invalid:3128")
			}
			return nil, nil
		}}
	for _, target := range []string{"https://upstream.invalid/v1/messages", proxied} {
		if status, got := post(t, context.Background(), tr, target, "x"); status != 200 || got != "next" {
			t.Fatalf("%s: %d %q, want net/http's transport to answer", target, status, got)
		}
	}
	if status, got := post(t, context.Background(), tr, srv.URL+"/direct", "x"); status != 200 || got != "got x" {
		t.Fatalf("direct: %d %q", status, got)
	}
	if len(next.urls) != 2 || cc.opened.Load() != 1 {
		t.Fatalf("net/http's transport got %v, the upstream %d connections; want the TLS and proxied calls there, the third direct", next.urls, cc.opened.Load())
	}
}
