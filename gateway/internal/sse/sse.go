// Package sse reads and writes server-sent events, the framing of the
// Anthropic Messages API's streamed answers (and of OpenAI's), for the
// gateway server and its client.
package sse

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Event is one server-sent event: its name and its data lines joined with
// newlines.
type Event struct {
	Name string
	Data []byte
}

// Reader reads server-sent events from a stream as they arrive, decoding
// their data and skipping those without any (comments, keep-alives).
type Reader struct {
	s *Splitter
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{s: NewSplitter(r)}
}

// Next returns the next event with data; io.EOF at a clean end of the
// stream, io.ErrUnexpectedEOF when it ends inside an event.
func (s *Reader) Next() (Event, error) {
	for {
		raw, err := s.s.Next()
		if err != nil {
			return Event{}, err
		}
		if ev := raw.Event(); len(ev.Data) > 0 {
			return ev, nil
		}
	}
}

// Writer forwards events to an HTTP response. Write sends and flushes one
// event; Append and WriteRaw gather events, for Flush to hand them to the
// response in one write and flush it, or WriteOut in one write without
// flushing (net/http then sends them with the end of the response). One
// write per batch, not per event, spares the response's per-write work.
// Release returns its buffer once the response is done.
type Writer struct {
	w       io.Writer
	rc      *http.ResponseController
	pending *[]byte // gathered events, not yet written
}

// maxPending is how much a Writer gathers at most before writing it out.
const maxPending = 32 << 10

// pendingPool recycles the buffers of Writers.
var pendingPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// NewWriter returns a Writer of w.
func NewWriter(w http.ResponseWriter) *Writer {
	return &Writer{w: w, rc: http.NewResponseController(w), pending: pendingPool.Get().(*[]byte)}
}

// Write sends one event and flushes it, after what was gathered.
func (s *Writer) Write(ev Event) error {
	if err := s.Append(ev); err != nil {
		return err
	}
	return s.Flush()
}

// Append gathers one event.
func (s *Writer) Append(ev Event) error {
	*s.pending = AppendEvent(*s.pending, ev)
	return s.spill()
}

// WriteRaw gathers bytes already framed as events (a Raw's Bytes): they
// are copied, so b may change once it returns.
func (s *Writer) WriteRaw(b []byte) error {
	*s.pending = append(*s.pending, b...)
	return s.spill()
}

// spill writes out what was gathered once it is large.
func (s *Writer) spill() error {
	if len(*s.pending) < maxPending {
		return nil
	}
	return s.WriteOut()
}

// WriteOut writes what was gathered to the response without flushing it.
func (s *Writer) WriteOut() error {
	if len(*s.pending) == 0 {
		return nil
	}
	_, err := s.w.Write(*s.pending)
	*s.pending = (*s.pending)[:0]
	if err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	return nil
}

// Flush writes what was gathered and flushes the response.
func (s *Writer) Flush() error {
	if err := s.WriteOut(); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}

// Release returns the Writer's buffer for reuse, dropping what is still
// gathered; the Writer must not be used after.
func (s *Writer) Release() {
	if s.pending == nil {
		return
	}
	if cap(*s.pending) <= maxPending*2 {
		*s.pending = (*s.pending)[:0]
		pendingPool.Put(s.pending)
	}
	s.pending = nil
}

// AppendEvent appends ev to dst in the wire form: its event line, a data
// line per line of its data, and the blank line that ends it.
func AppendEvent(dst []byte, ev Event) []byte {
	if ev.Name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, ev.Name...)
		dst = append(dst, '\n')
	}
	for line := range bytes.SplitSeq(ev.Data, []byte("\n")) {
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
	}
	return append(dst, '\n')
}
