// Package sse reads and writes server-sent events, the framing of the
// Anthropic Messages API's streamed answers (and of OpenAI's), for the
// gateway server and its client.
package sse

import (
	"bufio"
	"bytes"
	"errors"
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

// Reader reads server-sent events from a stream as they arrive.
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 16<<10)}
}

// Next returns the next event with data; io.EOF at a clean end of the
// stream, io.ErrUnexpectedEOF when it ends inside an event.
func (s *Reader) Next() (Event, error) {
	var ev Event
	var data bytes.Buffer
	seen := false
	for {
		line, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = s.r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if seen || len(line) > 0 {
					return Event{}, io.ErrUnexpectedEOF
				}
				return Event{}, io.EOF
			}
			return Event{}, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if seen && data.Len() > 0 {
				ev.Data = data.Bytes()
				return ev, nil
			}
			ev, seen = Event{}, false
			data.Reset()
			continue
		}
		seen = true
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.Name = string(value)
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(value)
		}
	}
}

// Writer forwards events to an HTTP response, flushing each one.
type Writer struct {
	w     io.Writer
	flush func() error
}

// NewWriter returns a Writer of w.
func NewWriter(w http.ResponseWriter) *Writer {
	rc := http.NewResponseController(w)
	return &Writer{w: w, flush: rc.Flush}
}

// Write sends one event and flushes it.
func (s *Writer) Write(ev Event) error {
	var buf bytes.Buffer
	buf.Grow(len(ev.Data) + len(ev.Name) + 16)
	if ev.Name != "" {
		buf.WriteString("event: ")
		buf.WriteString(ev.Name)
		buf.WriteByte('\n')
	}
	for line := range bytes.SplitSeq(ev.Data, []byte("\n")) {
		buf.WriteString("data: ")
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
	if _, err := s.w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := s.flush(); err != nil {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}
