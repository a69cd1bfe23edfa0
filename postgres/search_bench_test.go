package postgres

import (
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// BenchmarkSearchDoc measures cutting a chat-sized body into its search
// vector, which the writer does for every text message.
func BenchmarkSearchDoc(b *testing.B) {
	for _, body := range []string{
		"See you at 10 for the coffee? Message 12345 from sender 17",
		"Salut, on se voit à 10 h pour le café ? Message 12345 from sender 17",
	} {
		b.Run(body[:4], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				searchDoc("text", body)
			}
		})
	}
}

// TestSearchWords: words are cut as SQLite's unicode61 tokenizer with
// remove_diacritics cuts them, and written as a tsvector literal.
func TestSearchWords(t *testing.T) {
	for in, want := range map[string]string{
		"Hello, World!":          "'hello':1 'world':2",
		"Crème BRÛLÉE à 10h":     "'creme':1 'brulee':2 'a':3 '10h':4",
		"e\u0301te\u0301 it's":   "'ete':1 'it':2 's':3",
		"日本語 text_x":             "'日本語':1 'text':2 'x':3",
		"...":                    "",
		"ΑΘΗΝΑ café-bar 3.14":    "'αθηνα':1 'cafe':2 'bar':3 '3':4 '14':5",
		`quote ' back \ slashes`: "'quote':1 'back':2 'slashes':3",
	} {
		if got := searchDoc("text", in); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
	long := strings.Repeat("a", 3000)
	if got := searchDoc("text", long); len(got) != maxLexemeBytes+4 {
		t.Errorf("a 3000-letter word: %d bytes", len(got))
	}
	if q, err := searchQuery([]chat.SearchPart{{Text: "Café au", Prefix: true}, {Text: `x"y`}}); err != nil || q != `('cafe' <-> 'au':*) & ('x' <-> 'y')` {
		t.Errorf("query: %s, %v", q, err)
	}
}
