package gateway

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadAllSized(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 3000)
	tests := []struct {
		name     string
		declared int64
		limit    int64
		want     string
		tooBig   bool
	}{
		{"declared exactly", 3000, 10000, body, false},
		{"unknown length", -1, 10000, body, false},
		{"declared shorter than the body", 100, 10000, body, false},
		{"declared longer than the body", 5000, 10000, body, false},
		{"over the limit", 3000, 1000, "", true},
		{"declared over the limit", 20000, 1000, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), tt.limit)
			got, err := readAllSized(r, tt.declared, tt.limit)
			var tooBig *http.MaxBytesError
			switch {
			case tt.tooBig && !errors.As(err, &tooBig):
				t.Fatalf("err %v, want a MaxBytesError", err)
			case !tt.tooBig && (err != nil || string(got) != tt.want):
				t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(tt.want))
			}
		})
	}
}

// cutReader yields its text, then the error a connection cut short gives.
type cutReader struct{ r io.Reader }

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestReadAllSizedRefusesABodyCutShort: a body that breaks off before its
// declared length is an error, not a shorter body.
func TestReadAllSizedRefusesABodyCutShort(t *testing.T) {
	t.Parallel()
	for _, declared := range []int64{10, 3000} {
		got, err := readAllSized(&cutReader{strings.NewReader("0123456789")}, declared, 10000)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("declared %d: read %q, %v; want io.ErrUnexpectedEOF", declared, got, err)
		}
	}
}
