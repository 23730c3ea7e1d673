package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"
)

// newLogger builds the process's logger. Every duration attribute, however
// it was given (slog.Duration, or a time.Duration value), is written as
// milliseconds under its key with "_ms" added: "took":1503861270 becomes
// "took_ms":1503.861.
func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated at load
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsMillis}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationsAsMillis is the ReplaceAttr of newLogger.
func durationsAsMillis(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	key := a.Key
	if !strings.HasSuffix(key, "_ms") {
		key += "_ms"
	}
	return slog.Float64(key, millis(a.Value.Duration()))
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// redisLogger sends go-redis's own log lines (pool dial failures, bad
// pub/sub connections, …), which it would print as plain text on stderr,
// through slog as warnings.
type redisLogger struct{ l *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	r.l.WarnContext(ctx, strings.TrimPrefix(msg, "redis: "))
}
