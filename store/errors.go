package store

import (
	"errors"
	"fmt"

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
)

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

// ErrorCode returns the code of err, or CodeInternal when it carries none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
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
