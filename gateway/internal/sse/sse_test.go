package sse

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		want  []Event
		final error
	}{
		{"events", "event: a\ndata: {\"x\":1}\n\n: comment\n\nevent: b\ndata: 1\ndata: 2\n\n", []Event{{"a", []byte(`{"x":1}`)}, {"b", []byte("1\n2")}}, io.EOF},
		{"crlf", "event: a\r\ndata: x\r\n\r\n", []Event{{"a", []byte("x")}}, io.EOF},
		{"cut inside an event", "event: a\ndata: x\n\nevent: b\ndata: y", []Event{{"a", []byte("x")}}, io.ErrUnexpectedEOF},
		{"long line", "data: " + strings.Repeat("z", 40000) + "\n\n", []Event{{"", []byte(strings.Repeat("z", 40000))}}, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewReader(strings.NewReader(tt.in))
			for i, w := range tt.want {
				ev, err := r.Next()
				if err != nil || ev.Name != w.Name || !bytes.Equal(ev.Data, w.Data) {
					t.Fatalf("event %d = %q %q, %v", i, ev.Name, ev.Data, err)
				}
			}
			if _, err := r.Next(); !errors.Is(err, tt.final) {
				t.Fatalf("end = %v, want %v", err, tt.final)
			}
		})
	}
}

// TestWriterGathersUntilFlush checks that gathered events reach the
// response only in one write at Flush or WriteOut (flushed only by Flush),
// and that a large batch is written out before it grows further.
func TestWriterGathersUntilFlush(t *testing.T) {
	t.Parallel()
	rec := &countingRecorder{ResponseRecorder: httptest.NewRecorder()}
	w := NewWriter(rec)
	defer w.Release()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteRaw([]byte("event: a\ndata: 1\n\n")))
	must(w.Append(Event{Name: "b", Data: []byte("2\n3")}))
	if rec.writes != 0 || rec.Body.Len() != 0 {
		t.Fatalf("gathered events written early: %d writes, %q", rec.writes, rec.Body)
	}
	must(w.Flush())
	if want := "event: a\ndata: 1\n\nevent: b\ndata: 2\ndata: 3\n\n"; rec.writes != 1 || rec.Body.String() != want || !rec.Flushed {
		t.Fatalf("after Flush: %d writes, flushed %v, %q; want one write of %q", rec.writes, rec.Flushed, rec.Body, want)
	}
	rec.Flushed = false
	must(w.WriteRaw([]byte("event: c\ndata: 4\n\n")))
	must(w.WriteOut())
	if rec.writes != 2 || rec.Flushed || !strings.HasSuffix(rec.Body.String(), "event: c\ndata: 4\n\n") {
		t.Fatalf("after WriteOut: %d writes, flushed %v, %q", rec.writes, rec.Flushed, rec.Body)
	}
	must(w.WriteOut()) // nothing gathered: no write
	big := []byte("data: " + strings.Repeat("x", maxPending) + "\n\n")
	must(w.WriteRaw(big))
	if rec.writes != 3 || rec.Flushed {
		t.Fatalf("a batch over %d bytes: %d writes, flushed %v; want it written out, not flushed", maxPending, rec.writes, rec.Flushed)
	}
}

// countingRecorder counts the writes a response receives.
type countingRecorder struct {
	*httptest.ResponseRecorder
	writes int
}

func (r *countingRecorder) Write(b []byte) (int, error) {
	r.writes++
	return r.ResponseRecorder.Write(b)
}

func (r *countingRecorder) Flush() { r.ResponseRecorder.Flush() }
