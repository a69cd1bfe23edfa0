package bench

import (
	"math/rand/v2"
	"slices"
	"time"
)

// The default body (--body pad) is its timestamp and one word of 'x'
// padding, so every message shares two of its three words ("bench" and
// the padding) with every other: for a search index the worst case, since
// each edit or delete must then find its document in the longest lists
// the index has. --body words fills the body with words drawn by Zipf's
// law from a vocabulary of vocabSize made-up words (shortest most
// frequent), the way people write: a few words in most messages, most
// words in few.

const (
	vocabSize = 4000
	zipfS     = 1.1 // Zipf's exponent for word frequencies in text is about 1
)

// vocab is the vocabulary, most frequent first: syllables of a consonant
// and a vowel, one to four of them, from a fixed seed.
var vocab = func() []string {
	const consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	var out []string
	for len(out) < vocabSize {
		n := 1 + r.IntN(4)
		w := make([]byte, 0, 2*n)
		for range n {
			w = append(w, consonants[r.IntN(len(consonants))], vowels[r.IntN(len(vowels))])
		}
		if !seen[string(w)] {
			seen[string(w)] = true
			out = append(out, string(w))
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(a) - len(b) })
	return out
}()

// appendWords appends words to b (whose body began at start) until the
// body holds size bytes; the words are drawn from a generator seeded by
// sent, so the same body can be rebuilt (the folded check does).
func appendWords(b []byte, start int, sent time.Duration, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(sent), 0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, zipfS, 1, vocabSize-1)
	sep := false
	for len(b)-start < size {
		if sep {
			b = append(b, ' ')
		}
		b = append(b, vocab[z.Uint64()]...)
		sep = true
	}
	return b
}

// body is the shape of the run's bodies.
func (o Options) body() bodySpec {
	return bodySpec{size: o.BodySize, words: o.Body == "words"}
}
