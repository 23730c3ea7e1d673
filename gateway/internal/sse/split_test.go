package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSplitterPassesEventsAsTheyCame(t *testing.T) {
	t.Parallel()
	type raw struct{ name, bytes string }
	tests := []struct {
		name  string
		in    string
		want  []raw
		final error
	}{
		{"events", "event: a\ndata: {\"x\":1}\n\n: comment\n\nevent: b\ndata: 1\ndata: 2\n\n",
			[]raw{{"a", "event: a\ndata: {\"x\":1}\n\n"}, {"", ": comment\n\n"}, {"b", "event: b\ndata: 1\ndata: 2\n\n"}}, io.EOF},
		{"blank lines between events are dropped", "\n\nevent: a\ndata: x\n\n\r\n\n", []raw{{"a", "event: a\ndata: x\n\n"}}, io.EOF},
		{"crlf", "event: a\r\ndata: x\r\n\r\n", []raw{{"a", "event: a\r\ndata: x\r\n\r\n"}}, io.EOF},
		{"no space after the colon", "event:a\ndata:x\n\n", []raw{{"a", "event:a\ndata:x\n\n"}}, io.EOF},
		{"cut inside an event", "event: a\ndata: x\n\nevent: b\ndata: y", []raw{{"a", "event: a\ndata: x\n\n"}}, io.ErrUnexpectedEOF},
		{"cut after a line", "event: a\ndata: x\n", nil, io.ErrUnexpectedEOF},
		{"long event", "event: big\ndata: " + strings.Repeat("z", 40000) + "\n\n", []raw{{"big", "event: big\ndata: " + strings.Repeat("z", 40000) + "\n\n"}}, io.EOF},
		{"empty", "", nil, io.EOF},
	}
	for _, tt := range tests {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}, {"half", iotest.HalfReader}} {
			t.Run(tt.name+"/"+reader.name, func(t *testing.T) {
				t.Parallel()
				s := NewSplitter(reader.wrap(strings.NewReader(tt.in)))
				for i, w := range tt.want {
					ev, err := s.Next()
					if err != nil || ev.Name != w.name || string(ev.Bytes) != w.bytes {
						t.Fatalf("event %d = %q %q, %v; want %q %q", i, ev.Name, ev.Bytes, err, w.name, w.bytes)
					}
				}
				if _, err := s.Next(); !errors.Is(err, tt.final) {
					t.Fatalf("end = %v, want %v", err, tt.final)
				}
			})
		}
	}
}

func TestSplitterBufferedMeansNextDoesNotRead(t *testing.T) {
	t.Parallel()
	in := "event: a\ndata: 1\n\nevent: b\ndata: 2\n\nevent: c\nda"
	s := NewSplitter(strings.NewReader(in))
	if s.Buffered() {
		t.Fatal("buffered before any read")
	}
	if ev, err := s.Next(); err != nil || ev.Name != "a" {
		t.Fatalf("first = %q, %v", ev.Name, err)
	}
	// One read brought a and b: b is buffered, c is not whole.
	if !s.Buffered() {
		t.Fatal("b not buffered")
	}
	if ev, err := s.Next(); err != nil || ev.Name != "b" {
		t.Fatalf("second = %q, %v", ev.Name, err)
	}
	if s.Buffered() {
		t.Fatal("a cut event reported buffered")
	}
}

func TestRawEventDecodesData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want Event
	}{
		{"event: a\ndata: {\"x\":1}\n\n", Event{"a", []byte(`{"x":1}`)}},
		{"event: b\r\ndata: 1\r\ndata:2\r\nid: 7\r\n\r\n", Event{"b", []byte("1\n2")}},
		{": comment\n\n", Event{"", nil}},
		{"data:\n\n", Event{"", []byte{}}},
	}
	for _, tt := range tests {
		ev := Raw{Name: tt.want.Name, Bytes: []byte(tt.raw)}.Event()
		if ev.Name != tt.want.Name || !bytes.Equal(ev.Data, tt.want.Data) || (ev.Data == nil) != (tt.want.Data == nil) {
			t.Errorf("Event(%q) = %q %q, want %q %q", tt.raw, ev.Name, ev.Data, tt.want.Name, tt.want.Data)
		}
	}
}

func TestAppendEventRoundTrips(t *testing.T) {
	t.Parallel()
	for _, ev := range []Event{{"message_start", []byte(`{"a":1}`)}, {"", []byte("x\ny")}} {
		b := AppendEvent(nil, ev)
		raw, err := NewSplitter(bytes.NewReader(b)).Next()
		if err != nil || raw.Name != ev.Name || !bytes.Equal(raw.Bytes, b) || !bytes.Equal(raw.Data(), ev.Data) {
			t.Fatalf("%q: read back %q %q (%v)", b, raw.Name, raw.Data(), err)
		}
	}
}

// TestRawDataIsEventData: Data, a view of the bytes for one data line, is
// what Event decodes, whatever the lines.
func TestRawDataIsEventData(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"event: a\ndata: {\"x\":1}\n\n", "data:x\n\n", "data\n\n", "data:\n\n", "data:  two spaces\n\n",
		"event: a\n: comment\n\n", "data: 1\ndata: 2\n\n", "data: 1\r\ndata:2\r\n\r\n", "id: 7\ndata: x\nretry: 1\n\n",
		"event: a\r\ndata: x\r\n\r\n", "",
	} {
		raw := Raw{Bytes: []byte(in)}
		got, want := raw.Data(), raw.Event().Data
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%q: Data() = %q, Event().Data = %q", in, got, want)
		}
	}
}

// TestSplitterNamesAndRelease: known names and others read alike, and a
// released Splitter returns no more events, twice.
func TestSplitterNamesAndRelease(t *testing.T) {
	t.Parallel()
	s := NewSplitter(strings.NewReader("event: message_start\ndata: 1\n\nevent: custom\ndata: 2\n\nevent: ping\ndata: 3\n\n"))
	for _, want := range []string{"message_start", "custom"} {
		if ev, err := s.Next(); err != nil || ev.Name != want {
			t.Fatalf("Next = %q, %v; want %q", ev.Name, err, want)
		}
	}
	s.Release()
	s.Release()
	if ev, err := s.Next(); err == nil {
		t.Fatalf("Next after Release = %q, want an error", ev.Name)
	}
	if s.Buffered() {
		t.Fatal("Buffered after Release")
	}
}
