package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/imserver/imserver/chat"
)

// BenchmarkAppend measures plain text sends through the group commit: 64
// senders in 16 groups, each waiting for its answer, as sessions do.
// Bodies are chat-like sentences (what the search vector is cut from).
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	db, err := Open(ctx, pg.NewDB(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const groups, senders = 16, 64
	for g := range groups {
		var members []string
		for s := g; s < senders; s += groups {
			members = append(members, fmt.Sprint("u", s))
		}
		if err := db.CreateGroup(ctx, fmt.Sprint("g", g), "g", "owner", members); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	var next sync.Mutex
	sent := 0
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				next.Lock()
				if sent == b.N {
					next.Unlock()
					return
				}
				sent++
				next.Unlock()
				m := chat.Message{Conv: fmt.Sprint("g", s%groups), From: fmt.Sprint("u", s), ClientMsgID: fmt.Sprint(i), Kind: chat.KindText,
					Body: fmt.Sprintf("Salut, on se voit à %d h pour le café ? Message %d from sender %d", i%24, i, s)}
				if _, _, err := db.Append(ctx, m)(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
