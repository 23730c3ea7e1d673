// Package asynqlog sends asynq's own logs to log/slog, for the asynq
// servers and schedulers of the worker, the embeddings pipeline and
// retention.
package asynqlog

import (
	"fmt"
	"log/slog"
)

// Logger is an asynq.Logger writing to L, each line tagged
// component=asynq; asynq's Fatal is logged as an error (asynq exits after
// it is called).
type Logger struct{ L *slog.Logger }

// Debug logs at debug level.
func (a Logger) Debug(args ...any) {
	a.L.Debug(fmt.Sprint(args...), slog.String("component", "asynq"))
}

// Info logs at info level.
func (a Logger) Info(args ...any) {
	a.L.Info(fmt.Sprint(args...), slog.String("component", "asynq"))
}

// Warn logs at warn level.
func (a Logger) Warn(args ...any) {
	a.L.Warn(fmt.Sprint(args...), slog.String("component", "asynq"))
}

// Error logs at error level.
func (a Logger) Error(args ...any) {
	a.L.Error(fmt.Sprint(args...), slog.String("component", "asynq"))
}

// Fatal logs at error level.
func (a Logger) Fatal(args ...any) {
	a.L.Error(fmt.Sprint(args...), slog.String("component", "asynq"))
}
