package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// BenchmarkSearch measures two-word searches of a user who is in 100
// conversations holding 1M messages in all (IMSERVER_SEARCH_MESSAGES
// changes the count), populated through the writer in big batches. Words
// follow a Zipf law over a 20,000-word vocabulary; the query words are
// drawn from the 2,000 most common. It reports p50 and p99 latencies and
// the index's size against the bodies'. IMSERVER_SEARCH_DETAIL=column (or
// full) measures the index with that detail instead of none.
func BenchmarkSearch(b *testing.B) {
	total := 1_000_000
	if s := os.Getenv("IMSERVER_SEARCH_MESSAGES"); s != "" {
		total, _ = strconv.Atoi(s)
	}
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "search.db"), Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if detail := os.Getenv("IMSERVER_SEARCH_DETAIL"); detail != "" {
		// Compare the index's detail levels (migration 0007 chose none):
		// rebuild the empty index with another one before populating.
		for _, q := range []string{`DROP TABLE messages_fts`,
			`CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='', columnsize=0, detail=` + detail + `, tokenize='unicode61 remove_diacritics 2')`,
			`INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1)`,
			`INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 2)`} {
			if err := db.w.exec(ctx, func(t *wtx) error { _, err := t.ExecContext(ctx, q); return err }); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("index detail=%s", detail)
	}
	const convs = 100
	vocab := benchGroups(b, db, convs)
	start := time.Now()
	populate(b, db, total, convs, vocab)
	b.Logf("populated %d messages in %s", total, time.Since(start).Round(time.Second))
	bodies, index := searchSizes(b, db)
	b.Logf("bodies %d bytes, index %d bytes (%.2fx)", bodies, index, float64(index)/float64(bodies))

	// Sub-benchmarks, so that the population above runs once however
	// many rounds the timing takes. The phrases (two common words in that
	// order, rarely next to each other) are the index's worst case without
	// positions: each hit with both words is loaded and checked.
	for _, c := range []struct{ name, pre, post string }{{"two-words", "", ""}, {"two-word-phrase", `"`, `"`}} {
		b.Run(c.name, func(b *testing.B) { searchTwoWords(b, db, vocab, c.pre, c.post, float64(index)/float64(bodies)) })
	}
}

// searchTwoWords times b.N searches of two words among the 2,000 most
// common, each query wrapped in pre and post.
func searchTwoWords(b *testing.B, db *DB, vocab []string, pre, post string, ratio float64) {
	ctx := context.Background()
	qr := rand.New(rand.NewPCG(3, 4))
	durs := make([]time.Duration, 0, b.N)
	for range b.N {
		sq, err := chat.ParseSearch(pre + vocab[qr.IntN(2000)] + " " + vocab[qr.IntN(2000)] + post)
		if err != nil {
			b.Fatal(err)
		}
		sq.Limit = chat.DefaultSearchLimit
		t0 := time.Now()
		if _, err := db.Search(ctx, "u", sq); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(t0))
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(ratio, "index/bodies")
}

// benchGroups makes convs groups g000.. of user u and returns a
// 20,000-word vocabulary for their messages.
func benchGroups(b *testing.B, db *DB, convs int) []string {
	for i := range convs {
		if err := db.CreateGroup(context.Background(), fmt.Sprintf("g%03d", i), "g", "u", nil); err != nil {
			b.Fatal(err)
		}
	}
	vocab := make([]string, 20_000)
	wr := rand.New(rand.NewPCG(1, 2))
	for i := range vocab {
		w := make([]byte, 3+wr.IntN(7))
		for j := range w {
			w[j] = byte('a' + wr.IntN(26))
		}
		vocab[i] = string(w)
	}
	return vocab
}

// zipfBody is a message body of 6 to 14 words of vocab, drawn Zipf-like:
// rank ~ n^(u^3) keeps common words common.
func zipfBody(r *rand.Rand, vocab []string) string {
	words := make([]string, 6+r.IntN(9))
	for k := range words {
		words[k] = vocab[int(float64(len(vocab))*r.Float64()*r.Float64()*r.Float64())]
	}
	return strings.Join(words, " ")
}

// populate appends total messages through the writer, many in flight.
func populate(b *testing.B, db *DB, total, convs int, vocab []string) {
	ctx := context.Background()
	const workers, window = 8, 500
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			pending := make([]chat.Pending, 0, window)
			flush := func() bool {
				for _, p := range pending {
					if _, _, err := p(); err != nil {
						errs <- err
						return false
					}
				}
				pending = pending[:0]
				return true
			}
			for i := w; i < total; i += workers {
				pending = append(pending, db.Append(ctx, chat.Message{Conv: fmt.Sprintf("g%03d", i%convs), From: "u",
					ClientMsgID: strconv.Itoa(i), Kind: chat.KindText, Body: zipfBody(r, vocab)}))
				if len(pending) == window && !flush() {
					return
				}
			}
			flush()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// searchSizes returns the bytes of the bodies and of the search index
// (every page of its shadow tables, as dbstat counts them).
func searchSizes(b *testing.B, db *DB) (bodies, index int64) {
	if err := db.readers.QueryRow(`SELECT SUM(length(CAST(body AS BLOB))) FROM messages WHERE kind = 'text'`).Scan(&bodies); err != nil {
		b.Fatal(err)
	}
	if err := db.readers.QueryRow(`SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'messages_fts%'`).Scan(&index); err != nil {
		b.Logf("dbstat: %v; counting the index's blocks instead", err)
		if err := db.readers.QueryRow(`SELECT SUM(length(block)) FROM messages_fts_data`).Scan(&index); err != nil {
			b.Fatal(err)
		}
	}
	return bodies, index
}
