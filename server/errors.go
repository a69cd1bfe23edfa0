package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/imserver/imserver/chat"
)

// eMethodNotAllowed is a code of the transport alone: a known API path
// asked with a method it does not take.
const eMethodNotAllowed = "method_not_allowed"

// statusOf maps the domain's error codes to HTTP status: the one place
// where that happens.
func statusOf(code string) int {
	switch code {
	case eMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case eRangeNotSatisfiable:
		return http.StatusRequestedRangeNotSatisfiable
	case chat.EBadRequest:
		return http.StatusBadRequest
	case chat.EUnauthorized:
		return http.StatusUnauthorized
	case chat.EForbidden, chat.ENotMember:
		return http.StatusForbidden
	case chat.ENotFound:
		return http.StatusNotFound
	case chat.EConflict:
		return http.StatusConflict
	case chat.ETooLarge:
		return http.StatusRequestEntityTooLarge
	case chat.ERateLimited:
		return http.StatusTooManyRequests
	case chat.EUnavailable:
		return http.StatusServiceUnavailable
	case chat.EInsufficientStorage:
		return http.StatusInsufficientStorage
	default:
		return http.StatusInternalServerError
	}
}

// errorBody is the protocol's error object.
type errorBody struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

func toErrorBody(err error) errorBody {
	var e *chat.Error
	if errors.As(err, &e) {
		return errorBody{Code: e.Code, Message: e.Message, RetryAfterMS: e.RetryAfterMS}
	}
	return errorBody{Code: chat.EInternal, Message: "internal error"}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	body := toErrorBody(err)
	if body.Code == chat.EInternal {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if body.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt((body.RetryAfterMS+999)/1000, 10))
	} else if body.Code == chat.EUnavailable {
		// A dependency is down: tell clients and balancers to come back.
		w.Header().Set("Retry-After", "5")
	}
	writeJSON(w, statusOf(body.Code), map[string]errorBody{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Debug("writing response", "err", err)
	}
}

// errEmptyBody is decode's answer to a request without a body.
var errEmptyBody = chat.Errorf(chat.EBadRequest, "request body is empty")

// errNotUTF8 refuses JSON that is not UTF-8 (RFC 8259 requires it).
var errNotUTF8 = chat.Errorf(chat.EBadRequest, "request is not valid UTF-8")

// decode reads a JSON body of at most MaxRequestBytes into v.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return chat.Errorf(chat.ETooLarge, "request body is over %d bytes", s.cfg.MaxRequestBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return chat.Errorf(chat.EBadRequest, "request body did not arrive within %s", s.cfg.ReadTimeout)
	case err != nil:
		return chat.Errorf(chat.EBadRequest, "reading the request body: %v", err)
	case !utf8.Valid(data):
		// JSON decoding would turn the bad bytes into U+FFFD, and two
		// different ids could then come out the same.
		return errNotUTF8
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errEmptyBody
		}
		return chat.Errorf(chat.EBadRequest, "invalid JSON: %v", err)
	}
	if dec.More() {
		return chat.Errorf(chat.EBadRequest, "invalid JSON: data after the object")
	}
	return nil
}

// decodeOptional is decode for requests whose fields are all optional
// (`{max_uses?, expires_in_ms?}`, `{until_ms?}`): no body at all, also a
// chunked one that turns out empty, means every field absent.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	err := s.decode(w, r, v)
	if errors.Is(err, errEmptyBody) {
		return nil
	}
	return err
}
