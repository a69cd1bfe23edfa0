package storage

import (
	"strings"

	"github.com/imserver/imserver/chat"
)

// The search index (migration 0007) keeps no positions (detail=none): it
// knows which documents hold a word, not where. FTS5 then refuses phrase
// queries, so a term of several words ("a phrase", or e-mail, which the
// tokenizer splits in two) is asked of the index as its words, all
// required, and the order is checked here against the body. Both sides are
// cut into words the way the index's tokenizer (unicode61
// remove_diacritics 2) cuts them: chat.SearchWords.

// searchTerm is one term of a query as the index sees it.
type searchTerm struct {
	words  []string // folded
	prefix bool     // the last word is a prefix
}

// searchTerms cuts the query's parts into words.
func searchTerms(parts []chat.SearchPart) []searchTerm {
	terms := make([]searchTerm, 0, len(parts))
	for _, p := range parts {
		words := chat.SearchWords(p.Text)
		if len(words) == 0 {
			continue // punctuation alone: the parser drops it first
		}
		terms = append(terms, searchTerm{words: words, prefix: p.Prefix})
	}
	return terms
}

// ftsMatch is the query the index runs for terms: every word of every
// term, each quoted (so nothing in it is query syntax) and all required.
// It reports whether some term has several words, whose order the index
// cannot check (phraseMatch does).
func ftsMatch(terms []searchTerm) (match string, phrases bool) {
	var b strings.Builder
	for _, t := range terms {
		phrases = phrases || len(t.words) > 1
		for i, w := range t.words {
			if b.Len() > 0 {
				b.WriteString(" AND ")
			}
			b.WriteByte('"')
			b.WriteString(strings.ReplaceAll(w, `"`, `""`))
			b.WriteByte('"')
			if t.prefix && i == len(t.words)-1 {
				b.WriteByte('*')
			}
		}
	}
	return b.String(), phrases
}

// phraseMatch reports whether body holds every term of several words as
// consecutive words (the index already found each word in it).
func phraseMatch(body string, terms []searchTerm) bool {
	var words []string
	for _, t := range terms {
		if len(t.words) < 2 {
			continue
		}
		if words == nil {
			words = chat.SearchWords(body)
		}
		if !hasRun(words, t) {
			return false
		}
	}
	return true
}

// termsMatch reports whether body holds every term, each as consecutive
// words (an edited message's index entries may include words its edits
// took out: messages.stale).
func termsMatch(body string, terms []searchTerm) bool {
	if len(terms) == 0 {
		return true
	}
	words := chat.SearchWords(body)
	for _, t := range terms {
		if !hasRun(words, t) {
			return false
		}
	}
	return true
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// hasRun reports whether t's words appear in order, one after the other,
// in words.
func hasRun(words []string, t searchTerm) bool {
	n := len(t.words)
	for i := 0; i+n <= len(words); i++ {
		ok := true
		for k, w := range t.words {
			if k == n-1 && t.prefix {
				ok = strings.HasPrefix(words[i+k], w)
			} else {
				ok = words[i+k] == w
			}
			if !ok {
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
