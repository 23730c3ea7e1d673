package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rawServer answers every request on every connection with answer, as
// bytes, and closes the connection after it when closeAfter is set.
func rawServer(t *testing.T, answer string, closeAfter bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body) //nolint:errcheck
					if _, err := io.WriteString(c, answer); err != nil || closeAfter {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// callRaw makes one call through a new directTransport to a rawServer
// that answers answer and closes the connection.
func callRaw(t *testing.T, answer string) (*http.Response, error) {
	t.Helper()
	url := rawServer(t, answer, true)
	tr := testDirectTransport(t, time.Minute, time.Minute)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/messages", strings.NewReader("{}"))
	return tr.RoundTrip(req)
}

func TestDirectTransportReadsAnswerFramings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, answer, body string
		header             string // a header field the answer must carry, "Key: value"
		closeAfter         bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello", "hello", "Content-Type: text/plain", false},
		{"lower-case names", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nrequest-id: req_1\r\n\r\nok", "ok", "Request-Id: req_1", false},
		{"chunked with a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n", "abcde", "", false},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", "ok", "", false},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", "", "", false},
		{"early hints first", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", "", false},
		{"until close", "HTTP/1.1 200 OK\r\n\r\nall of it", "all of it", "", true},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := rawServer(t, tt.answer, tt.closeAfter)
			tr := testDirectTransport(t, time.Minute, time.Minute)
			for i := range 3 { // again and again on a kept connection
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/messages", strings.NewReader("{}"))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != tt.body {
					t.Fatalf("call %d: body %q, %v; want %q", i, b, err, tt.body)
				}
				if k, v, ok := strings.Cut(tt.header, ": "); ok && resp.Header.Get(k) != v {
					t.Fatalf("call %d: header %s = %q, want %q (%v)", i, k, resp.Header.Get(k), v, resp.Header)
				}
			}
		})
	}
}

func TestDirectTransportRefusesMalformedAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, answer, want string }{
		{"no status", "garbage\r\n\r\n", "malformed HTTP response"},
		{"bad version", "HTTP/2.0 200 OK\r\n\r\n", "malformed HTTP version"},
		{"bad status code", "HTTP/1.1 2x0 OK\r\n\r\n", "malformed HTTP status code"},
		{"folded header", "HTTP/1.1 200 OK\r\nA: b\r\n c\r\nContent-Length: 0\r\n\r\n", "folded line"},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", "malformed HTTP response header"},
		{"control character", "HTTP/1.1 200 OK\r\nA: b\x01c\r\nContent-Length: 0\r\n\r\n", "malformed HTTP response header value"},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok", "multiple Content-Length"},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", "bad Content-Length"},
		{"gzip transfer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported transfer encoding"},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Le", "unexpected EOF"},
		{"head over 1 MiB", "HTTP/1.1 200 OK\r\nA: " + strings.Repeat("x", 1<<20) + "\r\n\r\n", "head larger than"},
		{"too many 1xx", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 6), "too many 1xx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := callRaw(t, tt.answer)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("answer accepted: %d %v", resp.StatusCode, resp.Header)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want it to say %q", err, tt.want)
			}
		})
	}
}

func TestDirectTransportRefusesAHeaderItCannotSend(t *testing.T) {
	t.Parallel()
	url := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false)
	tr := testDirectTransport(t, time.Minute, time.Minute)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/messages", strings.NewReader("{}"))
	req.Header["X-Api-Key"] = []string{"sk-1\r\nX-Injected: 1"}
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), `invalid header field value for "X-Api-Key"`) || strings.Contains(err.Error(), "sk-1") {
		t.Fatalf("error %v, want the field refused without its value", err)
	}
}

// TestDirectTransportRefusesMalformedBodies: a body that breaks its own
// framing fails the read that reaches the break, after the bytes before it.
func TestDirectTransportRefusesMalformedBodies(t *testing.T) {
	t.Parallel()
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct{ name, answer, want string }{
		{"trailer over 16 KiB", head + "2\r\nok\r\n0\r\nX-Big: " + strings.Repeat("x", 16<<10) + "\r\n\r\n", "trailer larger than 16 KiB"},
		{"bad chunk size", head + "2\r\nok\r\nzz\r\n", "invalid byte in chunk length"},
		{"cut short", head + "2\r\nok\r\n5\r\nab", "unexpected EOF"},
		{"length cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := callRaw(t, tt.answer)
			if err != nil {
				t.Fatalf("head refused: %v", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("read %q, error %v, want it to say %q", body, err, tt.want)
			}
			if !strings.HasPrefix(string(body), "ok") {
				t.Fatalf("read %q before the error, want what came before the break", body)
			}
		})
	}
}

// FuzzReadResponse: a head this parser accepts, net/http's ReadResponse
// (past the same 1xx answers) accepts too, with the same status, header
// and framing, and keeps the connection no longer than net/http would.
func FuzzReadResponse(f *testing.F) {
	for _, a := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nrequest-id: req_1\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=1\r\nok\r\n0\r\nA: b\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\n\n",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nX: a\tb\r\n\r\n",
	} {
		f.Add([]byte(a))
	}
	req, _ := http.NewRequest(http.MethodPost, "http://upstream/v1/messages", nil)
	f.Fuzz(func(t *testing.T, answer []byte) {
		var head []byte
		got, framing, err := readResponse(bufio.NewReader(bytes.NewReader(answer)), req, &head)
		if err != nil {
			return
		}
		br := bufio.NewReader(bytes.NewReader(answer))
		want, err := http.ReadResponse(br, req)
		for err == nil && want.StatusCode < 200 && want.StatusCode != http.StatusSwitchingProtocols {
			want, err = http.ReadResponse(br, req)
		}
		if err != nil {
			t.Fatalf("accepted %q, net/http refuses it: %v", answer, err)
		}
		if got.StatusCode != want.StatusCode || got.Status != want.Status || got.ProtoMinor != want.ProtoMinor {
			t.Fatalf("%q: status %q (1.%d), net/http %q (1.%d)", answer, got.Status, got.ProtoMinor, want.Status, want.ProtoMinor)
		}
		if !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("%q: header %v, net/http %v", answer, got.Header, want.Header)
		}
		chunked := len(want.TransferEncoding) > 0
		// Close may be stricter: a length beside chunked closes the connection.
		if (framing.kind == chunkedBody) != chunked || want.Close && !got.Close {
			t.Fatalf("%q: framing %+v close %v, net/http chunked %v close %v", answer, framing, got.Close, chunked, want.Close)
		}
	})
}
