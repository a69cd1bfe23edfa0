package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// BenchmarkDeleteAtSize measures what a delete of a recent message costs
// the writer as the history grows (IMSERVER_DELETE_MESSAGES, default
// 100,000, populated as BenchmarkSearch does: Zipf words over a 20,000-word
// vocabulary). Each round appends a text and then deletes it, one at a
// time (no batching), and reports both appends' latencies: the delete's
// share is its search-index erasure (a secure delete seeks each of the
// body's words in every segment of the index).
func BenchmarkDeleteAtSize(b *testing.B) {
	total := 100_000
	if s := os.Getenv("IMSERVER_DELETE_MESSAGES"); s != "" {
		total, _ = strconv.Atoi(s)
	}
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "delete.db"), Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const convs = 100
	vocab := benchGroups(b, db, convs)
	populate(b, db, total, convs, vocab)
	r := rand.New(rand.NewPCG(5, 6))
	var text, del time.Duration
	b.ResetTimer()
	for i := range b.N {
		conv := fmt.Sprintf("g%03d", i%convs)
		t0 := time.Now()
		m, _, err := db.Append(ctx, chat.Message{Conv: conv, From: "u", ClientMsgID: "t" + strconv.Itoa(i), Kind: chat.KindText, Body: zipfBody(r, vocab)})()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, _, err := db.Append(ctx, chat.Message{Conv: conv, From: "u", ClientMsgID: "d" + strconv.Itoa(i), Kind: chat.KindDelete, Target: m.Seq})(); err != nil {
			b.Fatal(err)
		}
		text += t1.Sub(t0)
		del += time.Since(t1)
	}
	b.ReportMetric(float64(text.Microseconds())/float64(b.N), "text-µs")
	b.ReportMetric(float64(del.Microseconds())/float64(b.N), "delete-µs")
}
