package storage

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// BenchmarkDedupLayout compares the two places migration 0006 could keep
// its dedup key: a unique index on messages (conv, sender, cmid_hash), as
// it does, or a narrow table of its own written by a second statement.
// Each starts from a history of 300,000 messages over 300 conversations in
// a page cache of 2 MiB, smaller than either b-tree, as a long history is
// next to the default cache; an op is a batch of 100 appends into random
// old conversations and its commit (synchronous OFF: the b-tree work, not
// the disk).
func BenchmarkDedupLayout(b *testing.B) {
	for _, layout := range []string{"index", "table"} {
		b.Run(layout, func(b *testing.B) {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "d.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=cache_size(-2048)")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			schema := `CREATE TABLE messages (conv INTEGER NOT NULL, seq INTEGER NOT NULL, sender INTEGER NOT NULL, cmid_hash INTEGER NOT NULL,
				client_msg_id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (conv, seq)) WITHOUT ROWID;`
			if layout == "index" {
				schema += `CREATE UNIQUE INDEX messages_cmid ON messages (conv, sender, cmid_hash);`
			} else {
				schema += `CREATE TABLE dedup (conv INTEGER NOT NULL, sender INTEGER NOT NULL, cmid_hash INTEGER NOT NULL, seq INTEGER NOT NULL,
					PRIMARY KEY (conv, sender, cmid_hash)) WITHOUT ROWID;`
			}
			if _, err := db.Exec(schema); err != nil {
				b.Fatal(err)
			}
			const convs = 300
			seqs := make([]int64, convs)
			r := rand.New(rand.NewPCG(1, 2))
			appendN := func(n int) {
				tx, err := db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				ins, _ := tx.Prepare(`INSERT INTO messages (conv, seq, sender, cmid_hash, client_msg_id, body) VALUES (?, ?, ?, ?, ?, ?)` +
					map[string]string{"index": ` ON CONFLICT (conv, sender, cmid_hash) DO NOTHING`, "table": ``}[layout])
				dd, _ := tx.Prepare(`INSERT INTO dedup (conv, sender, cmid_hash, seq) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`)
				for range n {
					c := r.IntN(convs)
					seqs[c]++
					cmid := fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
					h, sender := cmidHash(cmid), 1+r.IntN(50)
					if layout == "table" {
						if _, err := dd.Exec(c, sender, h, seqs[c]); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := ins.Exec(c, seqs[c], sender, h, cmid, "a message body of about sixty bytes, as the history has"); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			for range 30 {
				appendN(10000)
			}
			b.ResetTimer()
			for range b.N {
				appendN(100)
			}
			b.StopTimer()
			var pages int64
			db.QueryRow(`PRAGMA page_count`).Scan(&pages)
			b.ReportMetric(float64(pages*4096)/float64(300000+100*b.N), "bytes/msg")
		})
	}
}
