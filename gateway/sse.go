package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// sseEvent is one server-sent event: its name and its data lines joined
// with newlines.
type sseEvent struct {
	name string
	data []byte
}

// errMalformed marks an upstream answer the gateway cannot read: 502.
var errMalformed = errors.New("malformed upstream response")

// sseReader reads server-sent events from a stream as they arrive.
type sseReader struct {
	r *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 16<<10)}
}

// next returns the next event with data; io.EOF at a clean end of the
// stream, io.ErrUnexpectedEOF when it ends inside an event.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
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
					return sseEvent{}, io.ErrUnexpectedEOF
				}
				return sseEvent{}, io.EOF
			}
			return sseEvent{}, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if seen && data.Len() > 0 {
				ev.data = data.Bytes()
				return ev, nil
			}
			ev, seen = sseEvent{}, false
			data.Reset()
			continue
		}
		seen = true
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.name = string(value)
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(value)
		}
	}
}

// sseWriter forwards events to the caller, flushing each one.
type sseWriter struct {
	w     io.Writer
	flush func() error
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	rc := http.NewResponseController(w)
	return &sseWriter{w: w, flush: rc.Flush}
}

func (s *sseWriter) write(ev sseEvent) error {
	var buf bytes.Buffer
	buf.Grow(len(ev.data) + len(ev.name) + 16)
	if ev.name != "" {
		buf.WriteString("event: ")
		buf.WriteString(ev.name)
		buf.WriteByte('\n')
	}
	for line := range bytes.SplitSeq(ev.data, []byte("\n")) {
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
