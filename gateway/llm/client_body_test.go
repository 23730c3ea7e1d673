package llm

import (
	"bytes"
	"io"
	"testing"
)

// A pooled body gives its buffer back exactly once, however the transport
// ends it: read to the end, written, closed, or closed again after that.
func TestSentBodyGivesItsBufferBackOnce(t *testing.T) {
	t.Parallel()
	ends := map[string]func(*sentBody) error{
		"read":  func(b *sentBody) error { _, err := io.ReadAll(b); return err },
		"write": func(b *sentBody) error { _, err := b.WriteTo(io.Discard); return err },
		"close": func(b *sentBody) error { return b.Close() },
		"read then close": func(b *sentBody) error {
			if _, err := io.ReadAll(b); err != nil {
				return err
			}
			return b.Close()
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			buf := append(getBodyBuf(), "0123456789"...)
			b := newSentBody(buf)
			if err := end(b); err != nil {
				t.Fatal(err)
			}
			if b.full != nil || b.b != nil {
				t.Fatal("the body kept its bytes")
			}
			_ = b.Close() // a second end gives nothing back
			if n, err := b.Read(make([]byte, 4)); n != 0 || err != io.EOF {
				t.Fatalf("read after the end: %d, %v", n, err)
			}
		})
	}
}

// A buffer from the pool starts empty, whatever it held before.
func TestBodyBufsStartEmpty(t *testing.T) {
	t.Parallel()
	putBodyBuf(bytes.Repeat([]byte("x"), 100))
	if b := getBodyBuf(); len(b) != 0 {
		t.Fatalf("a pooled buffer holds %d bytes", len(b))
	}
	putBodyBuf(make([]byte, 0, maxPooledBody+1)) // dropped, not pooled
}
