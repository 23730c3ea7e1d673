// Package sse reads and writes server-sent events, the framing of the
// Anthropic Messages API's streamed answers (and of OpenAI's), for the
// gateway server and its client.
package sse

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
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

// Writer forwards events to an HTTP response. Write flushes each event;
// Append and WriteRaw only buffer, for Flush to send what has gathered.
type Writer struct {
	w   io.Writer
	rc  *http.ResponseController
	buf []byte
}

// NewWriter returns a Writer of w.
func NewWriter(w http.ResponseWriter) *Writer {
	return &Writer{w: w, rc: http.NewResponseController(w)}
}

// Write sends one event and flushes it.
func (s *Writer) Write(ev Event) error {
	if err := s.Append(ev); err != nil {
		return err
	}
	return s.Flush()
}

// Append writes one event without flushing it.
func (s *Writer) Append(ev Event) error {
	s.buf = AppendEvent(s.buf[:0], ev)
	return s.WriteRaw(s.buf)
}

// WriteRaw writes bytes already framed as events (a Raw's Bytes) without
// flushing them.
func (s *Writer) WriteRaw(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	return nil
}

// Flush sends what was written.
func (s *Writer) Flush() error {
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
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
