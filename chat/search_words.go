package chat

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Search matches words the way SQLite's unicode61 tokenizer with
// remove_diacritics cuts them: letters, digits, private-use characters and
// combining marks make words, anything else separates them; case and
// diacritics are folded away. Both stores cut with EachSearchWord (SQLite
// to check phrases against a body, PostgreSQL to write its tsvectors and
// tsqueries), so they find the same messages for the same query.

// EachSearchWord calls f with the folded words of s in order. f must not
// keep w: its bytes are reused.
func EachSearchWord(s string, f func(w []byte)) {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			// Decomposed, an accented letter is its base and a mark.
			s = norm.NFD.String(s)
			break
		}
	}
	var buf [64]byte
	w := buf[:0]
	for _, r := range s {
		switch {
		case r >= utf8.RuneSelf && unicode.Is(unicode.Mn, r):
			// A combining mark is folded away and splits nothing.
		case isWordRune(r):
			switch {
			case 'A' <= r && r <= 'Z':
				w = append(w, byte(r)+'a'-'A')
			case r < utf8.RuneSelf:
				w = append(w, byte(r))
			default:
				w = utf8.AppendRune(w, unicode.ToLower(r))
			}
		case len(w) > 0:
			f(w)
			w = w[:0]
		}
	}
	if len(w) > 0 {
		f(w)
	}
}

// SearchWords returns the folded words of s (EachSearchWord).
func SearchWords(s string) []string {
	var out []string
	EachSearchWord(s, func(w []byte) { out = append(out, string(w)) })
	return out
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Co, r)
}
