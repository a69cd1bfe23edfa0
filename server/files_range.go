package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// eRangeNotSatisfiable is a code of the transport alone: a file asked
// for with a Range that lies outside it (416).
const eRangeNotSatisfiable = "range_not_satisfiable"

// serveRanged readies a file request's Range for http.ServeContent and
// answers ServeContent's refusals in the protocol's JSON. A Range of a
// unit other than bytes is ignored, as RFC 9110 (14.2) asks: the whole
// file is served. A suffix of no bytes ("bytes=-0") is unsatisfiable
// (RFC 9110, 14.1.1), which ServeContent would answer with an empty 206.
func serveRanged(w http.ResponseWriter, r *http.Request, size int64, serve func(http.ResponseWriter, *http.Request)) {
	if v := r.Header.Get("Range"); v != "" {
		spec, ok := strings.CutPrefix(v, "bytes=")
		switch {
		case !ok:
			r.Header.Del("Range")
		case strings.TrimSpace(spec) == "-0" && r.Header.Get("If-Range") == "" && r.Header.Get("If-None-Match") == "":
			// The only range, unsatisfiable. (Beside others, or under a
			// condition that may void the Range, ServeContent decides.)
			w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
			writeRangeRefusal(w, "the range asks for no bytes")
			return
		}
	}
	serve(&rangeWriter{ResponseWriter: w, size: size}, r)
}

// rangeWriter turns ServeContent's 416 (plain text) into the protocol's
// error object, with the file's size in Content-Range, which ServeContent
// sets only for a range past the end, not for one it cannot parse.
type rangeWriter struct {
	http.ResponseWriter
	size    int64
	refused bool
}

func (w *rangeWriter) WriteHeader(code int) {
	if code != http.StatusRequestedRangeNotSatisfiable {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.refused = true
	w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(w.size, 10))
	writeRangeRefusal(w.ResponseWriter, "the range lies outside the file (its size is in Content-Range)")
}

func (w *rangeWriter) Write(b []byte) (int, error) {
	if w.refused {
		return len(b), nil // ServeContent's text; the JSON was written
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (idleFile).
func (w *rangeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeRangeRefusal(w http.ResponseWriter, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(statusOf(eRangeNotSatisfiable))
	_ = json.NewEncoder(w).Encode(map[string]errorBody{"error": {Code: eRangeNotSatisfiable, Message: msg}})
}
