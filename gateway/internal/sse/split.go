package sse

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// Raw is one event as the stream framed it, undecoded.
type Raw struct {
	// Name is the value of its event line, "" for none.
	Name string
	// Bytes are its lines as they came, up to and including the blank line
	// that ends it. A Splitter's Raw is valid until its next call to Next.
	Bytes []byte
}

// Event decodes the event: its name and its data lines joined with
// newlines (nil for none), in memory of its own.
func (r Raw) Event() Event {
	ev := Event{Name: r.Name}
	rest := r.Bytes
	for len(rest) > 0 {
		var line []byte
		line, rest = cutLine(rest)
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if ev.Data == nil {
			ev.Data = make([]byte, 0, len(value))
		} else {
			ev.Data = append(ev.Data, '\n')
		}
		ev.Data = append(ev.Data, value...)
	}
	return ev
}

// Data is the event's data lines joined with newlines. An event of one
// data line (every event of the Anthropic and OpenAI streams) gets a view
// of its Bytes, valid as long as they are; one of several lines gets them
// joined in memory of its own.
func (r Raw) Data() []byte {
	var one []byte
	found := false
	for rest := r.Bytes; len(rest) > 0; {
		var line []byte
		line, rest = cutLine(rest)
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		if found {
			return r.Event().Data
		}
		one, found = bytes.TrimPrefix(value, []byte(" ")), true
	}
	switch {
	case !found:
		return nil
	case one == nil: // a "data" line without a colon
		return []byte{}
	}
	return one[:len(one):len(one)]
}

// cutLine splits b after its first line; the line is returned without its
// end (\n or \r\n).
func cutLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil
	}
	line, rest = b[:i], b[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

// Splitter cuts a stream into events without decoding them: it finds
// where each ends (a blank line) and reads the event line's name, nothing
// else, so that a relay can pass the bytes on as they came.
type Splitter struct {
	r   io.Reader
	buf []byte
	off int // start of the unread bytes buf[off:]
	// The event being scanned: it starts at off; lines up to scan are
	// complete and none of them blank; name is its event line's value.
	scan  int
	name  string
	ready bool // buf[off:scan] is a whole event
	err   error
}

// splitBufSize is a Splitter's first buffer: it holds a few events of a
// model's stream, and grows for a longer one.
const splitBufSize = 4 << 10

// splitBufs are the first buffers of released Splitters.
var splitBufs = sync.Pool{New: func() any { b := make([]byte, 0, splitBufSize); return &b }}

// NewSplitter returns a Splitter of r.
func NewSplitter(r io.Reader) *Splitter {
	return &Splitter{r: r, buf: (*(splitBufs.Get().(*[]byte)))[:0]}
}

// Release hands the Splitter's buffer back for another Splitter to use:
// no Raw it returned may be read afterwards, nor may Next be called. A
// second Release does nothing.
func (s *Splitter) Release() {
	if s.buf == nil {
		return
	}
	if cap(s.buf) == splitBufSize {
		b := s.buf[:0]
		splitBufs.Put(&b)
	}
	s.buf, s.off, s.scan, s.ready = nil, 0, 0, false
	if s.err == nil {
		s.err = errReleased
	}
}

// errReleased is what Next returns after Release.
var errReleased = errors.New("sse: splitter released")

// Next returns the next event, which may carry no data (a comment); io.EOF
// at a clean end of the stream, io.ErrUnexpectedEOF when it ends inside an
// event. It reads from the stream only when no whole event is buffered.
func (s *Splitter) Next() (Raw, error) {
	for !s.find() {
		if s.err != nil {
			if errors.Is(s.err, io.EOF) {
				if len(s.buf) > s.off {
					return Raw{}, io.ErrUnexpectedEOF
				}
				return Raw{}, io.EOF
			}
			return Raw{}, s.err
		}
		s.fill()
	}
	ev := Raw{Name: s.name, Bytes: s.buf[s.off:s.scan:s.scan]}
	s.off, s.name, s.ready = s.scan, "", false
	return ev, nil
}

// Ended reports whether the stream has ended cleanly and every event of it
// was returned: Next would return io.EOF without reading.
func (s *Splitter) Ended() bool {
	return errors.Is(s.err, io.EOF) && len(s.buf) == s.off
}

// Buffered reports whether a whole event is buffered, so that Next
// returns it without reading from the stream.
func (s *Splitter) Buffered() bool { return s.find() }

// find scans the buffered bytes for the end of the current event.
func (s *Splitter) find() bool {
	if s.ready {
		return true
	}
	for {
		rest := s.buf[s.scan:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return false
		}
		line := rest[:i]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		s.scan += i + 1
		if len(line) == 0 {
			if s.scan-(i+1) == s.off {
				// A blank line before any field: nothing to pass on.
				s.off = s.scan
				continue
			}
			s.ready = true
			return true
		}
		if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			s.name = eventName(bytes.TrimPrefix(v, []byte(" ")))
		}
	}
}

// fill reads once more from the stream, making room first.
func (s *Splitter) fill() {
	if s.off > 0 {
		n := copy(s.buf, s.buf[s.off:])
		s.scan -= s.off
		s.buf, s.off = s.buf[:n], 0
	}
	if len(s.buf) == cap(s.buf) {
		s.buf = append(s.buf, make([]byte, cap(s.buf))...)[:len(s.buf)]
	}
	n, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf = s.buf[:len(s.buf)+n]
	if err != nil {
		s.err = err
	}
}

// knownNames are the event names of the Anthropic Messages stream, whose
// strings a Splitter shares instead of allocating one per event.
var knownNames = []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
	"message_delta", "message_stop", "ping", "error"}

// eventName is b as a string, one of knownNames when it is one.
func eventName(b []byte) string {
	for _, n := range knownNames {
		if string(b) == n {
			return n
		}
	}
	return string(b)
}
