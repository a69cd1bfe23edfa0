package floor

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// BenchmarkBareTeamMix is the floor under issue 11's budget (the send
// scenario's sends/s with the team mix within 10% of plain text): the
// fewest writes each kind of send needs in SQLite, with nothing of the
// server around them, in a schema as narrow as the storage's and the same
// search index (FTS5, contentless, detail=none, secure-delete, automerge
// 2, pgsz 1000). One op is one send, mixCommit a commit, round-robin over 100
// conversations, synchronous=FULL:
//
//   - text: its row, and its body's words into the index;
//   - reaction (10% of the team mix): its row, and a row of the reactions
//     table added or taken out;
//   - edit (3%): its row with the new body, the target's body replaced,
//     the new body's words into the index under the target's number;
//   - delete (1%): its row, the target's body and reactions erased, and
//     the target's words out of the index (a secure delete).
//
// Targets are among the 256 newest texts of the conversation, as the
// bench's own messages are. The index's writes are made at the end of each
// transaction in ascending document order, as the storage makes them.
// body=pad is the bench's default body (a timestamp and a word every
// message shares); body=words draws words by Zipf's law from 4,000, as
// `imserver bench --body words` does. Compare cpu-ns/op of mix=team with
// mix=none of the same body.
func BenchmarkBareTeamMix(b *testing.B) {
	for _, body := range []string{"pad", "words"} {
		for _, mix := range []string{"none", "team"} {
			b.Run(fmt.Sprintf("body=%s/mix=%s", body, mix), func(b *testing.B) {
				benchMix(b, body, mix == "team", mixCommit)
			})
		}
	}
}

// BenchmarkBareIndexedInsert is BenchmarkBareSQLiteInsert with the search
// index a text needs (BenchmarkBareTeamMix's text only, the bench's
// default body): the floor under the storage's part of an interactive
// message, 40 to a commit as in `imserver bench --scenario interactive`.
func BenchmarkBareIndexedInsert(b *testing.B) {
	b.Run("rows=40", func(b *testing.B) { benchMix(b, "pad", false, 40) })
}

// mixCommit is the sends of a commit: a few hundred, as in the send
// scenario's commits (100 senders with up to 100 sends in flight each).
const mixCommit = 256

type mixConv struct {
	seq     int64
	texts   []int64                   // ids of the newest live texts
	held    map[int64]string          // the words the index holds for each
	reacted map[int64]map[string]bool // target id → emoji → on
}

type ftsWrite struct {
	id     int64
	body   string
	delete bool
}

func benchMix(b *testing.B, bodyKind string, team bool, commit int) {
	dsn := "file:" + filepath.Join(b.TempDir(), "mix.db") +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE messages (id INTEGER PRIMARY KEY, conv INTEGER NOT NULL, seq INTEGER NOT NULL,
			sender INTEGER NOT NULL, kind INTEGER NOT NULL, body TEXT NOT NULL, target INTEGER, created INTEGER NOT NULL)`,
		`CREATE UNIQUE INDEX messages_conv_seq ON messages (conv, seq)`,
		`CREATE TABLE reactions (target INTEGER NOT NULL, emoji TEXT NOT NULL, user INTEGER NOT NULL, seq INTEGER NOT NULL,
			PRIMARY KEY (target, emoji, user)) WITHOUT ROWID`,
		`CREATE VIRTUAL TABLE fts USING fts5(body, content='', columnsize=0, detail=none, tokenize='unicode61 remove_diacritics 2')`,
		`INSERT INTO fts (fts, rank) VALUES ('secure-delete', 1)`,
		`INSERT INTO fts (fts, rank) VALUES ('automerge', 2)`,
		`INSERT INTO fts (fts, rank) VALUES ('pgsz', 1000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 11))
	zipf := rand.NewZipf(r, 1.1, 1, uint64(len(mixVocab)-1))
	makeBody := func(i int) string {
		if bodyKind == "pad" {
			s := fmt.Sprintf("bench %d ", i)
			return s + strings.Repeat("x", max(1, 64-len(s)))
		}
		var sb strings.Builder
		for sb.Len() < 64 {
			if sb.Len() > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(mixVocab[zipf.Uint64()])
		}
		return sb.String()
	}
	convs := make([]*mixConv, 100)
	for i := range convs {
		convs[i] = &mixConv{held: map[int64]string{}, reacted: map[int64]map[string]bool{}}
	}
	emoji := []string{"+1", "tada", "eyes"}
	const (
		kindText = iota
		kindReaction
		kindEdit
		kindDelete
	)
	// Statements prepared once, on the one connection, as the storage's
	// writer keeps them.
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	stmt := func(q string) *sql.Stmt {
		st, err := conn.PrepareContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	begin, end := stmt(`BEGIN IMMEDIATE`), stmt(`COMMIT`)
	ins := stmt(`INSERT INTO messages (id, conv, seq, sender, kind, body, target, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	setBody := stmt(`UPDATE messages SET body = ? WHERE id = ?`)
	react := stmt(`INSERT INTO reactions (target, emoji, user, seq) VALUES (?, ?, ?, ?)`)
	unreact := stmt(`DELETE FROM reactions WHERE target = ? AND emoji = ? AND user = ?`)
	dropReactions := stmt(`DELETE FROM reactions WHERE target = ?`)
	add := stmt(`INSERT INTO fts (rowid, body) VALUES (?, ?)`)
	del := stmt(`INSERT INTO fts (fts, rowid, body) VALUES ('delete', ?, ?)`)
	exec := func(st *sql.Stmt, args ...any) {
		if _, err := st.ExecContext(ctx, args...); err != nil {
			b.Fatal(err)
		}
	}
	var id int64
	var writes []ftsWrite
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; {
		exec(begin)
		writes = writes[:0]
		for n := 0; n < commit && i < b.N; n++ {
			ci := i % 100
			c := convs[ci]
			c.seq++
			id++
			kind, target, body := kindText, int64(0), ""
			if x := r.Float64(); team && len(c.texts) > 0 {
				target = c.texts[r.IntN(len(c.texts))]
				switch {
				case x < 0.01:
					kind = kindDelete
				case x < 0.04:
					kind = kindEdit
				case x < 0.14:
					kind = kindReaction
				}
			}
			switch kind {
			case kindText:
				body = makeBody(i)
				exec(ins, id, ci, c.seq, ci, kind, body, nil, int64(i))
				writes = append(writes, ftsWrite{id: id, body: body})
				c.held[id] = body
				c.texts = append(c.texts, id)
				if len(c.texts) > 256 {
					delete(c.held, c.texts[0])
					delete(c.reacted, c.texts[0])
					c.texts = c.texts[1:]
				}
			case kindReaction:
				e := emoji[r.IntN(len(emoji))]
				exec(ins, id, ci, c.seq, ci, kind, e, target, int64(i))
				if c.reacted[target] == nil {
					c.reacted[target] = map[string]bool{}
				}
				if c.reacted[target][e] {
					exec(unreact, target, e, ci)
				} else {
					exec(react, target, e, ci, c.seq)
				}
				c.reacted[target][e] = !c.reacted[target][e]
			case kindEdit:
				body = makeBody(i)
				exec(ins, id, ci, c.seq, ci, kind, body, target, int64(i))
				exec(setBody, body, target)
				// The words the index lacks, as the storage's extend adds
				// them (the old ones stay until a delete).
				if add := missingWords(c.held[target], body); add != "" {
					writes = append(writes, ftsWrite{id: target, body: add})
					c.held[target] += " " + add
				}
			case kindDelete:
				exec(ins, id, ci, c.seq, ci, kind, "", target, int64(i))
				exec(setBody, "", target)
				exec(dropReactions, target)
				writes = append(writes, ftsWrite{id: target, body: c.held[target], delete: true})
				delete(c.held, target)
				delete(c.reacted, target)
				c.texts = slices.DeleteFunc(c.texts, func(t int64) bool { return t == target })
			}
			i++
		}
		// The index's writes in ascending document order, a delete of a
		// document before what is added to it.
		slices.SortStableFunc(writes, func(a, b ftsWrite) int {
			if a.id != b.id {
				return int(a.id - b.id)
			}
			if a.delete != b.delete {
				if a.delete {
					return -1
				}
				return 1
			}
			return 0
		})
		for _, w := range writes {
			if w.delete {
				exec(del, w.id, w.body)
			} else {
				exec(add, w.id, w.body)
			}
		}
		exec(end)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// missingWords returns the words of body that held lacks.
func missingWords(held, body string) string {
	have := map[string]bool{}
	for _, w := range strings.Fields(held) {
		have[w] = true
	}
	var out []string
	for _, w := range strings.Fields(body) {
		if !have[w] {
			have[w] = true
			out = append(out, w)
		}
	}
	return strings.Join(out, " ")
}

// mixVocab is a vocabulary of made-up words, shortest first, like the
// bench's --body words.
var mixVocab = func() []string {
	const consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	var out []string
	for len(out) < 4000 {
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
