package chat

import (
	"errors"
	"fmt"
)

// Error codes of the wire protocol. The server maps each to an HTTP status in
// one place; the domain only says what went wrong.
const (
	EBadRequest   = "bad_request"
	EUnauthorized = "unauthorized"
	EForbidden    = "forbidden"
	ENotMember    = "not_member"
	ENotFound     = "not_found"
	EConflict     = "conflict"
	ETooLarge     = "too_large"
	ERateLimited  = "rate_limited"
	EUnavailable  = "unavailable"
	// EInsufficientStorage: the server's file storage is full.
	EInsufficientStorage = "insufficient_storage"
	EInternal            = "internal"
)

// Error is a failure a client can act on: a code from the list above and a
// message for humans. RetryAfterMS is set for rate_limited.
type Error struct {
	Code         string
	Message      string
	RetryAfterMS int64
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, or EInternal when err is not an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the human message of err; internal errors are not
// described to clients because they may carry paths or SQL.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
