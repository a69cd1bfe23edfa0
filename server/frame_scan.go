package server

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// scanFrame decodes the common client frame, a flat object of known keys
// with plain string and integer values, without encoding/json's reflection:
// the read loop of every session runs it for every frame, and its shallow
// stack is what an idle session keeps. It returns ok=false for anything
// else (syntax errors, unknown or differently cased keys, escapes,
// values of the wrong type, numbers out of range); the caller then decodes
// with encoding/json, whose result this one equals whenever ok is true
// (FuzzScanFrame checks that).
func scanFrame(data []byte) (f clientFrame, ok bool) {
	if !json.Valid(data) {
		return f, false
	}
	// data is valid JSON from here on, which keeps the scanning simple.
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return f, false
	}
	i = skipSpace(data, i+1)
	if data[i] == '}' {
		return f, true
	}
	for {
		key, next, plain := scanString(data, i)
		if !plain {
			return f, false
		}
		i = skipSpace(data, next)
		i = skipSpace(data, i+1) // the colon
		end := valueEnd(data, i)
		if !f.set(key, data[i:end]) {
			return f, false
		}
		i = skipSpace(data, end)
		if data[i] == '}' {
			return f, true
		}
		i = skipSpace(data, i+1) // the comma
	}
}

// set stores one member's raw value; false means the frame needs
// encoding/json.
func (f *clientFrame) set(key string, v []byte) bool {
	switch key {
	case "type":
		return setString(&f.Type, v)
	case "req":
		if isNull(v) {
			return true
		}
		f.Req.set = setString(&f.Req.s, v)
		return f.Req.set
	case "conv":
		return setString(&f.Conv, v)
	case "client_msg_id":
		return setString(&f.ClientMsgID, v)
	case "kind":
		return setString(&f.Kind, v)
	case "body":
		if isNull(v) {
			f.Body = nil
			return true
		}
		var s string
		if !setString(&s, v) {
			return false
		}
		f.Body = &s
		return true
	case "attachments":
		return false // an array: encoding/json's
	case "emoji":
		return setString(&f.Emoji, v)
	case "target":
		return setInt(&f.Target, v)
	case "reply_to":
		return setInt(&f.ReplyTo, v)
	case "on":
		switch string(v) {
		case "null":
			f.On = nil
		case "true", "false":
			b := v[0] == 't'
			f.On = &b
		default:
			return false
		}
		return true
	case "seq":
		return setInt(&f.Seq, v)
	case "after_seq":
		return setInt(&f.AfterSeq, v)
	case "limit":
		if isNull(v) {
			f.Limit = nil
			return true
		}
		var l frameLimit
		if err := l.UnmarshalJSON(v); err != nil || l == badFrameLimit {
			return false // encoding/json decodes what is no limit
		}
		f.Limit = &l
		return true
	}
	// encoding/json matches keys case-insensitively (with Unicode folding):
	// an unknown key is only skipped here when it is plain lower-case ASCII
	// and so cannot match a field.
	for j := 0; j < len(key); j++ {
		if c := key[j]; c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// setString sets *dst from a JSON string without escapes and in valid
// UTF-8; null leaves it unchanged, as encoding/json does.
func setString(dst *string, v []byte) bool {
	if isNull(v) {
		return true
	}
	s, _, plain := scanString(v, 0)
	if !plain {
		return false
	}
	*dst = s
	return true
}

// setInt sets *dst from an integer literal, or to nil from null.
func setInt(dst **int64, v []byte) bool {
	if isNull(v) {
		*dst = nil
		return true
	}
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false
	}
	*dst = &n
	return true
}

func isNull(v []byte) bool { return string(v) == "null" }

// scanString reads the JSON string starting at data[i]. plain is false when
// it is not a string or holds escapes or invalid UTF-8 (encoding/json would
// rewrite those).
func scanString(data []byte, i int) (s string, next int, plain bool) {
	if i >= len(data) || data[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '\\':
			return "", j, false
		case c == '"':
			raw := data[i+1 : j]
			if !utf8.Valid(raw) {
				return "", j, false
			}
			return string(raw), j + 1, true
		}
	}
	return "", len(data), false
}

// valueEnd returns the end of the valid JSON value starting at data[i].
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = stringEnd(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// stringEnd returns the index after the closing quote of the string at
// data[i].
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
