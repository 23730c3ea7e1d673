package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The HTTP/1.1 framing of a directConn's calls: the request written and
// the response head parsed here, into the net/http types the rest of the
// gateway reads, at a fraction of the allocations of Request.Write and
// ReadResponse. What it does not frame itself (a body of unknown length,
// trailers, Connection: close on the request) goes to Request.Write.
// Response heads are read as RFC 9112 has a client read them, at least as
// strictly as ReadResponse does; the differences are listed in
// docs/decisions.md ("The upstream's HTTP/1.1 framing").

// maxResponseHead bounds an upstream's status line and header fields.
const maxResponseHead = 1 << 20

// max1xxResponses bounds the informational answers before the real one,
// as net/http's Transport does.
const max1xxResponses = 5

var (
	errHeadTooLarge  = fmt.Errorf("upstream response head larger than %d bytes", maxResponseHead)
	errToo1xx        = errors.New("too many 1xx informational responses")
	errTrailerTooBig = errors.New("chunked body trailer larger than 16 KiB")
)

// defaultUserAgent is the User-Agent of a request without one, as net/http
// sends it.
const defaultUserAgent = "Go-http-client/1.1"

// framesRequest reports whether writeRequest frames req itself.
func framesRequest(req *http.Request) bool {
	known := req.ContentLength > 0 || req.Body == nil || req.Body == http.NoBody
	return known && !req.Close && len(req.TransferEncoding) == 0 && req.Trailer == nil && req.URL.Opaque == ""
}

// checkRequest refuses a request writeRequest could not send as it is:
// an invalid method or Host, or a header field name or value with a
// newline or another control character in it.
func checkRequest(req *http.Request) error {
	if !framesRequest(req) {
		return nil // Request.Write checks it
	}
	if host := requestHost(req); !httpguts.ValidHostHeader(host) || strings.Contains(host, "%") {
		return fmt.Errorf("http: invalid Host header %q", host)
	}
	if !validMethod(req.Method) {
		return fmt.Errorf("net/http: invalid method %q", req.Method)
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

func requestHost(req *http.Request) string {
	if req.Host != "" {
		return req.Host
	}
	return req.URL.Host
}

// writeRequest writes req, which checkRequest passed, to bw as HTTP/1.1
// with its body, and closes the body as Request.Write does.
func writeRequest(bw *bufio.Writer, req *http.Request) (err error) {
	if req.Body != nil {
		defer func() {
			if cerr := req.Body.Close(); err == nil {
				err = cerr
			}
		}()
	}
	if !framesRequest(req) {
		return req.Write(bw)
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(requestHost(req))
	ua := defaultUserAgent
	if _, has := req.Header["User-Agent"]; has {
		ua = req.Header.Get("User-Agent")
	}
	if ua != "" {
		bw.WriteString("\r\nUser-Agent: ")
		bw.WriteString(textproto.TrimString(ua))
	}
	if sendsLength(req) {
		bw.WriteString("\r\nContent-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), req.ContentLength, 10))
	}
	for k, vs := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		for _, v := range vs {
			bw.WriteString("\r\n")
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
		}
	}
	if _, err := bw.WriteString("\r\n\r\n"); err != nil {
		return err
	}
	if req.ContentLength <= 0 {
		return nil
	}
	n, err := io.Copy(bw, req.Body)
	if err == nil && n != req.ContentLength {
		err = fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n)
	}
	return err
}

// sendsLength reports whether a Content-Length goes with req: for a body,
// and for an empty one where servers expect it, as net/http decides.
func sendsLength(req *http.Request) bool {
	if req.ContentLength > 0 {
		return true
	}
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	}
	return false
}

func validMethod(m string) bool {
	return m != "" && strings.IndexFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) }) < 0
}

// readResponse reads the head of req's answer from br, skipping up to
// max1xxResponses informational ones, into resp and reports how its body
// is framed. head is scratch space for the head's bytes, kept by the
// caller for the next call.
func readResponse(br *bufio.Reader, req *http.Request, head *[]byte) (*http.Response, bodyFraming, error) {
	for range max1xxResponses + 1 {
		resp, err := readResponseHead(br, head)
		if err != nil {
			return nil, bodyFraming{}, err
		}
		resp.Request = req
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			f, err := frameResponse(resp, req.Method)
			if err != nil {
				return nil, bodyFraming{}, err
			}
			return resp, f, nil
		}
	}
	return nil, bodyFraming{}, errToo1xx
}

// readResponseHead reads a status line and header fields, up to and with
// the blank line that ends them.
func readResponseHead(br *bufio.Reader, head *[]byte) (*http.Response, error) {
	buf, lines, err := readHeadBytes(br, (*head)[:0])
	if *head = buf; cap(buf) > 64<<10 {
		*head = nil // a rare long head: not kept with the connection
	}
	if err != nil {
		return nil, err
	}
	s := string(buf) // one string: the status and every name and value are slices of it
	line, s := cutHeadLine(s)
	proto, status, ok := strings.Cut(line, " ")
	if !ok {
		return nil, fmt.Errorf("malformed HTTP response %q", line)
	}
	resp := &http.Response{Proto: proto, Status: strings.TrimLeft(status, " ")}
	if resp.ProtoMajor, resp.ProtoMinor, ok = http.ParseHTTPVersion(proto); !ok || resp.ProtoMajor != 1 {
		return nil, fmt.Errorf("malformed HTTP version %q", proto)
	}
	code, _, _ := strings.Cut(resp.Status, " ")
	if resp.StatusCode, ok = statusCode(code); !ok {
		return nil, fmt.Errorf("malformed HTTP status code %q", code)
	}
	resp.Header = make(http.Header, lines)
	slab := make([]string, 0, lines)
	for s != "" {
		line, s = cutHeadLine(s)
		if line == "" {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, fmt.Errorf("malformed HTTP response header: folded line %q", line)
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("malformed HTTP response header %q", line)
		}
		v = strings.Trim(v, " \t") // as textproto: a CR is not space but a control character
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("malformed HTTP response header value for %q", k)
		}
		k = textproto.CanonicalMIMEHeaderKey(k) // no allocation when already canonical
		if vs, ok := resp.Header[k]; ok {
			resp.Header[k] = append(vs, v)
			continue
		}
		slab = append(slab, v)
		resp.Header[k] = slab[len(slab)-1 : len(slab) : len(slab)]
	}
	return resp, nil
}

// readHeadBytes appends the head's bytes to buf, up to and with the
// blank line that ends it, and counts its lines.
func readHeadBytes(br *bufio.Reader, buf []byte) (_ []byte, lines int, err error) {
	start := 0 // of the line being read
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > maxResponseHead {
			return buf, 0, errHeadTooLarge
		}
		buf = append(buf, frag...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return buf, 0, io.ErrUnexpectedEOF
		case err != nil:
			return buf, 0, err
		}
		line := buf[start:]
		start = len(buf)
		lines++
		if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
			return buf, lines, nil
		}
	}
}

// cutHeadLine cuts the first line off s, without its CRLF or LF.
func cutHeadLine(s string) (line, rest string) {
	line, rest, _ = strings.Cut(s, "\n")
	return strings.TrimSuffix(line, "\r"), rest
}

// statusCode parses three digits.
func statusCode(s string) (int, bool) {
	if len(s) != 3 || s[0] < '1' || s[0] > '9' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0'), true
}
