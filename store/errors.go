package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Code classifies an error for callers that branch on it. The api maps codes
// to HTTP statuses and the planner's tools to error results, one table each.
type Code string

// The error codes of SPEC §10.
const (
	CodeInvalid         Code = "invalid_argument"
	CodeUnauthenticated Code = "unauthenticated"
	CodeForbidden       Code = "forbidden"
	CodeNotFound        Code = "not_found"
	CodeAlreadyExists   Code = "already_exists"
	CodeConflict        Code = "conflict"
	CodeInternal        Code = "internal"
	// CodeUnavailable is a refusal because Postgres cannot be reached right
	// now; the caller should retry after UnavailableRetryAfter.
	CodeUnavailable Code = "unavailable"
)

// UnavailableRetryAfter is how long the edges ask a client to wait
// (Retry-After) before it retries an unavailable error.
const UnavailableRetryAfter = 5 * time.Second

// Error is a domain error with a code and a message safe to show the caller.
type Error struct {
	Code    Code
	Message string
	// Details carries structured context (e.g. the current version on a conflict).
	Details map[string]any
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds a coded error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err: its own, CodeUnavailable when Postgres
// could not be reached (see IsUnavailable), else CodeInternal.
func ErrorCode(err error) Code {
	if e := AsError(err); e != nil {
		return e.Code
	}
	return CodeInternal
}

// AsError returns the coded error in err's chain, or an unavailable error
// when err says Postgres could not be reached, or nil. It is what each edge
// (REST, the gateway, JSON-RPC) maps to its own status, once.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if IsUnavailable(err) {
		return Errorf(CodeUnavailable, "the database is unavailable; retry in %d seconds", int(UnavailableRetryAfter.Seconds()))
	}
	return nil
}

// unavailableStates are the SQLSTATEs of a server that is going away or
// refuses connections: admin, crash and start-up shutdown, too many
// connections.
var unavailableStates = map[string]bool{"57P01": true, "57P02": true, "57P03": true, "53300": true}

// IsUnavailable reports whether err means Postgres could not be reached or
// went away: a failed connect (refused, reset, timed out), a connection
// that broke mid-query, a server shutting down (57P01…57P03), a connection
// exception (class 08) or too many connections. A caller's own cancelled
// context is not unavailability, nor is any error the server answered.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return unavailableStates[pe.Code] || (len(pe.Code) == 5 && pe.Code[:2] == "08")
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's deadline, while the server answered slowly
	}
	// What is left of pgconn's own errors (they all tell whether they are
	// safe to retry) is a network failure: refused, reset, broken mid-query.
	var fromConn interface{ SafeToRetry() bool }
	if errors.As(err, &fromConn) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	// A server that crashed mid-result: pgx returns the reader's bare
	// io.ErrUnexpectedEOF, or the socket's error.
	var ne *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// IsCode reports whether err carries the code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// notFound maps pgx.ErrNoRows to a not_found error naming what was sought.
func notFound(err error, what string, args ...any) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return Errorf(CodeNotFound, what+" not found", args...)
	}
	return err
}

// isUniqueViolation reports whether err is a unique violation, optionally on
// the named constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		return false
	}
	return constraint == "" || pe.ConstraintName == constraint
}

// mapCheck turns a check-constraint violation into an invalid_argument error.
func mapCheck(err error, format string, args ...any) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23514" {
		return Errorf(CodeInvalid, format, args...)
	}
	return err
}

// pgCode is the SQLSTATE of an error the server answered with, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
