// Package files keeps uploaded files on disk: streamed to a temp file,
// hashed, fsynced and renamed to their content hash; their thumbnails; the
// rules for naming and serving them; and the signed links browsers load
// them with. Metadata lives in the database (chat.FileStore).
package files

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes caps a file name (most file systems allow 255 bytes).
const MaxNameBytes = 255

// SanitizeName makes a client's file name safe to show and to put in a
// Content-Disposition header: the last path element only, no NUL, control
// or bidirectional formatting characters (which can make "evil‮gpj.exe"
// read as "evilexe.jpg"), valid UTF-8, at most MaxNameBytes bytes with the
// extension kept, and never empty.
func SanitizeName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(name, "") {
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case r == utf8.RuneError, unicode.IsControl(r), isBidiControl(r), unicode.Is(unicode.Cf, r) && r != '\u200d':
			continue // ZWJ stays: emoji sequences need it
		default:
			b.WriteRune(r)
		}
	}
	name = strings.TrimSpace(b.String())
	// "." and ".." (and names of dots only) mean directories.
	if strings.Trim(name, ".") == "" {
		name = ""
	}
	if len(name) > MaxNameBytes {
		ext := ""
		if i := strings.LastIndexByte(name, '.'); i > 0 && len(name)-i <= 16 {
			ext = name[i:]
		}
		name = truncateUTF8(name[:len(name)-len(ext)], MaxNameBytes-len(ext)) + ext
	}
	if name == "" {
		return "file"
	}
	return name
}

// isBidiControl reports the explicit directional formatting characters.
func isBidiControl(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' ||
		('\u202a' <= r && r <= '\u202e') || ('\u2066' <= r && r <= '\u2069')
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
