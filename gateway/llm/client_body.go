package llm

import (
	"io"
	"sync"
)

// The buffers of a connection to the gateway (see NewClient).
const (
	connReadBuffer  = 2 << 10
	connWriteBuffer = 1 << 10
)

// sentBody is a request body that lets go of its bytes as soon as they are
// written: the transport holds a request's body until the answer is read to
// its end, which for a streamed model call is the whole call, and the
// encoded request (tools, system prompt, conversation) is the largest thing
// a waiting call would otherwise keep.
//
// A body that came from getBodyBuf goes back to the pool once written or
// closed: the transport has copied it to the connection by then.
type sentBody struct {
	mu   sync.Mutex // the transport may Close from another goroutine than Read
	b    []byte
	full []byte // all of the buffer, for the pool; nil once given back
}

func newSentBody(b []byte) *sentBody { return &sentBody{b: b, full: b} }

// Read copies out what is left, and drops the bytes once all are read.
func (s *sentBody) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.b) == 0 {
		s.release()
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	if len(s.b) == 0 {
		s.release()
	}
	return n, nil
}

// WriteTo writes what is left in one write, and drops the bytes.
func (s *sentBody) WriteTo(w io.Writer) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := w.Write(s.b)
	s.b = s.b[n:]
	if len(s.b) == 0 {
		s.release()
	}
	return int64(n), err
}

// Close drops what is left.
func (s *sentBody) Close() error {
	s.mu.Lock()
	s.release()
	s.mu.Unlock()
	return nil
}

// release drops the bytes and gives the buffer back. s.mu is held.
func (s *sentBody) release() {
	s.b = nil
	if s.full != nil {
		putBodyBuf(s.full)
		s.full = nil
	}
}

// Request bodies are encoded into pooled buffers: a model request is tens
// of KiB (tools, system prompt, conversation), built on every call.
const (
	bodyBufSize   = 32 << 10
	maxPooledBody = 1 << 20 // a larger buffer is left to the GC
)

var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, bodyBufSize); return &b }}

// getBodyBuf returns an empty buffer from the pool.
func getBodyBuf() []byte { return (*bodyBufs.Get().(*[]byte))[:0] }

// putBodyBuf gives a buffer back to the pool.
func putBodyBuf(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBody {
		return
	}
	b = b[:0]
	bodyBufs.Put(&b)
}
