package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
)

// framingKind is how the body of an answer ends (RFC 9112, section 6.3).
type framingKind uint8

const (
	noBody      framingKind = iota // a HEAD answer, 1xx, 204, 304, or Content-Length: 0
	lengthBody                     // after Content-Length bytes
	chunkedBody                    // at the last chunk and its trailer
	closeBody                      // when the upstream closes the connection
)

// bodyFraming is the framing of one answer's body.
type bodyFraming struct {
	kind framingKind
	left int64 // bytes still to read of a lengthBody
}

// chunkedEncoding is the TransferEncoding of a chunked answer (read only).
var chunkedEncoding = []string{"chunked"}

// frameResponse reads from resp's head how its body is framed, sets its
// ContentLength, TransferEncoding and Close as ReadResponse would, and
// refuses the framings ReadResponse refuses: a Transfer-Encoding other
// than chunked alone, and Content-Length values that differ or are not a
// number. An answer with both Transfer-Encoding and Content-Length is read
// chunked, and its connection is not used again.
func frameResponse(resp *http.Response, method string) (bodyFraming, error) {
	h := resp.Header
	te, chunked := h["Transfer-Encoding"], false
	if te != nil {
		delete(h, "Transfer-Encoding")
		if resp.ProtoMinor >= 1 { // HTTP/1.0 has none: ignored, as net/http does
			if len(te) != 1 {
				return bodyFraming{}, fmt.Errorf("too many transfer encodings: %q", te)
			}
			if !strings.EqualFold(te[0], "chunked") {
				return bodyFraming{}, fmt.Errorf("unsupported transfer encoding: %q", te[0])
			}
			chunked = true
		}
	}
	length := int64(-1)
	if cl := h["Content-Length"]; len(cl) > 0 {
		for _, v := range cl[1:] {
			if v != cl[0] {
				return bodyFraming{}, fmt.Errorf("http: message cannot contain multiple Content-Length headers; got %q", cl)
			}
		}
		h["Content-Length"] = cl[:1:1]
		n, err := parseLength(cl[0])
		if err != nil {
			return bodyFraming{}, err
		}
		length = n
	}
	resp.Close = closes(resp)
	switch code := resp.StatusCode; {
	case method == http.MethodHead:
		resp.ContentLength = length
		return bodyFraming{kind: noBody}, nil
	case code == http.StatusSwitchingProtocols:
		resp.Close = true // never asked for: the connection is not HTTP any more
		return bodyFraming{kind: noBody}, nil
	case code/100 == 1 || code == http.StatusNoContent || code == http.StatusNotModified:
		resp.ContentLength = 0
		return bodyFraming{kind: noBody}, nil
	case chunked:
		if length >= 0 {
			delete(h, "Content-Length")
			resp.Close = true
		}
		resp.ContentLength, resp.TransferEncoding = -1, chunkedEncoding
		return bodyFraming{kind: chunkedBody}, nil
	case length == 0:
		resp.ContentLength = 0
		return bodyFraming{kind: noBody}, nil
	case length > 0:
		resp.ContentLength = length
		return bodyFraming{kind: lengthBody, left: length}, nil
	}
	resp.ContentLength, resp.Close = -1, true
	return bodyFraming{kind: closeBody}, nil
}

// parseLength parses a Content-Length value: decimal digits only.
func parseLength(v string) (int64, error) {
	if v == "" {
		return 0, errors.New(`invalid empty Content-Length ""`)
	}
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil || v[0] == '+' {
		return 0, fmt.Errorf("bad Content-Length %q", v)
	}
	return int64(n), nil
}

// closes reports whether the upstream closes the connection after resp:
// Connection: close, or HTTP/1.0 without Connection: keep-alive.
func closes(resp *http.Response) bool {
	conn := resp.Header["Connection"]
	if httpguts.HeaderValuesContainsToken(conn, "close") {
		return true
	}
	return resp.ProtoMinor == 0 && !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
}

// maxTrailer bounds the trailer section of a chunked body.
const maxTrailer = 16 << 10

// readTrailer reads and drops the trailer section after a chunked body's
// last chunk, up to and with its blank line.
func readTrailer(br *bufio.Reader) error {
	total, whole := 0, true // whole: the fragment read starts a line
	for {
		frag, err := br.ReadSlice('\n')
		if total += len(frag); total > maxTrailer {
			return errTrailerTooBig
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			whole = false
			continue
		case errors.Is(err, io.EOF):
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
		if whole && (len(frag) == 1 || (len(frag) == 2 && frag[0] == '\r')) {
			return nil
		}
		whole = true
	}
}

// directBody is the body of an answer on a directConn, read through its
// framing. Close may be called while a Read waits (drainBody does): it
// ends that Read.
type directBody struct {
	c      *directConn
	f      bodyFraming
	chunks io.Reader   // the chunked framing's reader, for a chunkedBody
	stop   func() bool // ends the watch on the request's context
	keep   bool        // neither side asked to close the connection
	err    error       // a broken trailer: every later Read fails with it
	eof    atomic.Bool
	closed atomic.Bool
}

func newDirectBody(c *directConn, f bodyFraming, stop func() bool, keep bool) *directBody {
	b := &directBody{c: c, f: f, stop: stop, keep: keep}
	if f.kind == chunkedBody {
		b.chunks = httputil.NewChunkedReader(c.br)
	}
	b.eof.Store(f.kind == noBody)
	return b
}

func (b *directBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errReadOnClosedBody
	}
	n, err := b.read(p)
	if err == io.EOF { //nolint:errorlint // io.EOF is returned unwrapped: the clean end only
		b.eof.Store(true)
	}
	return n, err
}

// read reads the body's next bytes; io.EOF (unwrapped) only at its end,
// which for a lengthBody may come with its last bytes.
func (b *directBody) read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	switch b.f.kind {
	case lengthBody:
		if int64(len(p)) > b.f.left {
			p = p[:b.f.left]
		}
		n, err := b.c.br.Read(p)
		if b.f.left -= int64(n); b.f.left == 0 {
			b.f.kind = noBody
			return n, io.EOF
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	case chunkedBody:
		n, err := b.chunks.Read(p)
		if errors.Is(err, io.EOF) {
			b.f.kind = noBody
			if terr := readTrailer(b.c.br); terr != nil {
				b.err, err = terr, terr
			}
		}
		return n, err
	case closeBody:
		return b.c.br.Read(p)
	}
	return 0, io.EOF
}

// Close hands the connection back to the pool when the whole body was
// read and the call was not cancelled; otherwise it closes it, since
// unread bytes of this answer would be taken for the next one's.
func (b *directBody) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	if b.stop() && b.eof.Load() && b.keep {
		b.c.t.put(b.c)
		return nil
	}
	return b.c.nc.Close()
}
