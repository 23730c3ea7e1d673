package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestDurationsPrintAsMilliseconds: a duration attribute, however given,
// is written as named milliseconds, never as bare nanoseconds.
func TestDurationsPrintAsMilliseconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		log  func(l *slog.Logger)
		want map[string]any // top-level keys of the JSON line
	}{
		{"slog.Duration", func(l *slog.Logger) { l.Info("turn ended", slog.Duration("took", 1503861270)) },
			map[string]any{"took_ms": 1503.861}},
		{"key and time.Duration", func(l *slog.Logger) { l.Info("retrying", "wait", 500*time.Millisecond) },
			map[string]any{"wait_ms": 500.0}},
		{"already named", func(l *slog.Logger) { l.Info("x", slog.Duration("lease_ms", 2*time.Second)) },
			map[string]any{"lease_ms": 2000.0}},
		{"sub-millisecond", func(l *slog.Logger) { l.Info("x", slog.Duration("took", 1500*time.Nanosecond)) },
			map[string]any{"took_ms": 0.002}},
		{"in a group", func(l *slog.Logger) { l.Info("x", slog.Group("call", slog.Duration("took", time.Second))) },
			map[string]any{"call": map[string]any{"took_ms": 1000.0}}},
		{"other kinds untouched", func(l *slog.Logger) { l.Info("x", slog.Int64("took_tokens", 7)) },
			map[string]any{"took_tokens": 7.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			tt.log(newLogger(LogConfig{Level: "info", Format: "json"}, &buf))
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("not one JSON line: %v: %s", err, buf.String())
			}
			for k, want := range tt.want {
				got, _ := json.Marshal(line[k])
				if w, _ := json.Marshal(want); string(got) != string(w) {
					t.Errorf("%s = %s, want %s; line %s", k, got, w, buf.String())
				}
			}
		})
	}
}

// TestDurationsPrintAsMillisecondsInText: the text format names them the same.
func TestDurationsPrintAsMillisecondsInText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	newLogger(LogConfig{Level: "info", Format: "text"}, &buf).Info("x", slog.Duration("took", 1503861270))
	if !strings.Contains(buf.String(), "took_ms=1503.861") {
		t.Fatalf("text format: %s", buf.String())
	}
}

// TestGoRedisLogLineIsJSON: what go-redis prints through the logger setup
// installs is a JSON line with a level and the message, not plain text.
func TestGoRedisLogLineIsJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newLogger(LogConfig{Level: "info", Format: "json"}, &buf)
	// go-redis's own format: a "redis: " prefix, sometimes a trailing newline.
	redisLogger{l.With(slog.String("component", "go-redis"))}.Printf(context.Background(),
		"redis: %s:%d: connection pool: failed to dial after %d attempts: %v\n", "127.0.0.1", 6379, 5, "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var line struct {
		Level, Msg, Component string
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("not JSON: %v: %s", err, lines[0])
	}
	want := "127.0.0.1:6379: connection pool: failed to dial after 5 attempts: connection refused"
	if line.Level != "WARN" || line.Msg != want || line.Component != "go-redis" {
		t.Fatalf("line %+v, want level WARN, msg %q, component go-redis", line, want)
	}
}
