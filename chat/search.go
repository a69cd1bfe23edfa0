package chat

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Search limits: results per page, and what a query may hold.
const (
	DefaultSearchLimit = 20
	MaxSearchLimit     = 100
	maxQueryBytes      = 512
	maxQueryTerms      = 16
	maxCursorBytes     = 256
)

// SearchQuery is a parsed search. Match is a full-text query the store can
// run as is: every term quoted, so that nothing a user types is taken as
// query syntax by the index.
type SearchQuery struct {
	Match string
	Terms []string // the words and phrases, for snippets
	// Parts are the terms as the user wrote them, Match's operands in
	// order: a store whose index cannot run phrases itself (SQLite's
	// reduced-detail FTS5) matches their words and checks the order
	// against the body.
	Parts []SearchPart
	Conv  string // "" for every conversation of the user
	// BeforeSeq keeps seqs below it (paging with Conv; without, in every
	// conversation, as the contract allows); 0 for none.
	BeforeSeq int64
	// Cursor is the Next of the page before, "" for the first page: it
	// pages across conversations, where one seq says nothing.
	Cursor string
	Limit  int
}

// SearchPart is one term of a query: a word or a "phrase" (the text
// between the quotes), a prefix when * followed it.
type SearchPart struct {
	Text   string
	Prefix bool
}

// SearchIndexing says how far a store's search index has been built
// (an upgraded database is indexed in the background): results come only
// from the Done documents indexed so far, out of Total.
type SearchIndexing struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
}

// SearchHit is one search result.
type SearchHit struct {
	Conv    string  `json:"conv"`
	Message Message `json:"message"`
	Snippet string  `json:"snippet"`
}

// SearchResults is a page of search results, newest first.
type SearchResults struct {
	Results   []SearchHit `json:"results"`
	Completed bool        `json:"completed"`
	// Indexing is set while the index is still being built: older
	// messages may be missing from the results.
	Indexing *SearchIndexing `json:"indexing,omitempty"`
	// Next, set when Completed is false, is where this page ended, for
	// the next page's cursor. It is the store's and means nothing else.
	Next string `json:"next,omitempty"`
}

// ErrBadCursor answers a cursor that is not of the form this store's
// pages give.
var ErrBadCursor = Errorf(EBadRequest, "cursor is malformed: pass the next of a search's answer")

// Search finds the text messages user may see whose current body matches
// q: words (all must match, whole words, any order), "quoted phrases" and
// prefix*; case and accents are ignored.
func (s *Service) Search(ctx context.Context, user, q, conv string, beforeSeq int64, cursor string, limit int) (SearchResults, error) {
	sq, err := ParseSearch(q)
	if err != nil {
		return SearchResults{}, err
	}
	if beforeSeq < 0 {
		return SearchResults{}, Errorf(EBadRequest, "before_seq must be >= 0")
	}
	switch {
	case limit <= 0:
		limit = DefaultSearchLimit
	case limit > MaxSearchLimit:
		limit = MaxSearchLimit
	}
	if len(cursor) > maxCursorBytes {
		return SearchResults{}, ErrBadCursor
	}
	sq.Conv, sq.BeforeSeq, sq.Cursor, sq.Limit = conv, beforeSeq, cursor, limit
	return s.store.Search(ctx, user, sq)
}

// ParseSearch turns what a user typed into a SearchQuery, or says why it
// cannot (bad_request).
func ParseSearch(q string) (SearchQuery, error) {
	var sq SearchQuery
	if !utf8.ValidString(q) {
		return sq, Errorf(EBadRequest, "q must be UTF-8")
	}
	if len(q) > maxQueryBytes {
		return sq, Errorf(EBadRequest, "q is longer than %d bytes", maxQueryBytes)
	}
	// NUL separates words as any other non-alphanumeric does; left in a
	// term it would end the index's quoted string early (a 500).
	q = strings.ReplaceAll(q, "\x00", " ")
	var parts []string
	for i := 0; i < len(q); {
		r, n := utf8.DecodeRuneInString(q[i:])
		switch {
		case unicode.IsSpace(r):
			i += n
		case r == '"':
			end := strings.IndexByte(q[i+1:], '"')
			if end < 0 {
				return sq, Errorf(EBadRequest, `a "phrase" is not closed`)
			}
			phrase := q[i+1 : i+1+end]
			i += end + 2
			prefix := strings.HasPrefix(q[i:], "*")
			if prefix {
				i++
			}
			if !hasWord(phrase) {
				return sq, Errorf(EBadRequest, "a phrase holds no word")
			}
			parts = append(parts, quoteTerm(phrase, prefix))
			sq.Terms = append(sq.Terms, phrase)
			sq.Parts = append(sq.Parts, SearchPart{Text: phrase, Prefix: prefix})
		default:
			j := i
			for j < len(q) {
				r, n := utf8.DecodeRuneInString(q[j:])
				if unicode.IsSpace(r) || r == '"' {
					break
				}
				j += n
			}
			word := q[i:j]
			i = j
			if strings.ContainsAny(word, "()^:+{}") {
				return sq, Errorf(EBadRequest, `%q: search takes words, "phrases" and prefix*`, word)
			}
			prefix := strings.HasSuffix(word, "*")
			word = strings.TrimSuffix(word, "*")
			if strings.Contains(word, "*") {
				return sq, Errorf(EBadRequest, "%q: * ends a prefix", word)
			}
			if !hasWord(word) {
				if prefix {
					return sq, Errorf(EBadRequest, "* needs a prefix before it")
				}
				continue // punctuation alone matches nothing and is no error
			}
			parts = append(parts, quoteTerm(word, prefix))
			sq.Terms = append(sq.Terms, word)
			sq.Parts = append(sq.Parts, SearchPart{Text: word, Prefix: prefix})
		}
	}
	if len(parts) == 0 {
		return sq, Errorf(EBadRequest, "q holds no word to search for")
	}
	if len(parts) > maxQueryTerms {
		return sq, Errorf(EBadRequest, "q holds more than %d terms", maxQueryTerms)
	}
	sq.Match = strings.Join(parts, " AND ")
	return sq, nil
}

// quoteTerm quotes s as one FTS5 string (a phrase of its tokens).
func quoteTerm(s string, prefix bool) string {
	t := `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	if prefix {
		t += "*"
	}
	return t
}

// hasWord reports whether s holds a letter or a digit: the tokenizer drops
// everything else, and an empty phrase matches nothing.
func hasWord(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return true
		}
	}
	return false
}

// Snippet cuts from body the part around the first term found (ignoring
// case), about width runes long, with … where it was cut.
func Snippet(body string, terms []string, width int) string {
	if utf8.RuneCountInString(body) <= width {
		return body
	}
	lower := strings.ToLower(body)
	at := -1
	for _, t := range terms {
		if i := strings.Index(lower, strings.ToLower(t)); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at < 0 || len(lower) != len(body) {
		at = 0
	}
	runes := []rune(body)
	center := utf8.RuneCountInString(body[:at])
	start := max(0, center-width/3)
	end := min(len(runes), start+width)
	start = max(0, end-width)
	out := string(runes[start:end])
	if start > 0 {
		out = "…" + out
	}
	if end < len(runes) {
		out += "…"
	}
	return out
}
