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
type sentBody struct {
	mu sync.Mutex // the transport may Close from another goroutine than Read
	b  []byte
}

// Read copies out what is left, and drops the bytes once all are read.
func (s *sentBody) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.b) == 0 {
		s.b = nil
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	if len(s.b) == 0 {
		s.b = nil
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
		s.b = nil
	}
	return int64(n), err
}

// Close drops what is left.
func (s *sentBody) Close() error {
	s.mu.Lock()
	s.b = nil
	s.mu.Unlock()
	return nil
}
