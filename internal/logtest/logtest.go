// Package logtest captures what a process under test logs from many
// goroutines, and reads its JSON records back.
package logtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Buffer is a log destination safe for concurrent writers and a reading
// test. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Records decodes every line written so far as a JSON object; a line that
// is not one fails t.
func (b *Buffer) Records(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, rec)
	}
	return out
}

// Find is the records with message msg whose fields hold every value of
// match (compared as strings, so numbers match their decimal text).
func (b *Buffer) Find(t testing.TB, msg string, match map[string]string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range b.Records(t) {
		if rec["msg"] != msg || !holds(rec, match) {
			continue
		}
		out = append(out, rec)
	}
	return out
}

func holds(rec map[string]any, match map[string]string) bool {
	for k, want := range match {
		v, ok := rec[k]
		if !ok {
			return false
		}
		got, isString := v.(string)
		if !isString {
			raw, _ := json.Marshal(v)
			got = string(raw)
		}
		if got != want {
			return false
		}
	}
	return true
}
