package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// BenchmarkAppend measures durable appends through the group-commit writer
// with many concurrent senders into 100 groups (b.N messages in all).
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(sync, func(b *testing.B) {
			ctx := context.Background()
			db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			convs := make([]string, 100)
			for i := range convs {
				convs[i] = fmt.Sprintf("g%03d", i)
				if err := db.CreateGroup(ctx, convs[i], convs[i], "u", nil); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			b.SetParallelism(256) // many senders in flight, as on a busy server
			b.ResetTimer()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					_, _, err := db.Append(ctx, chat.Message{Conv: convs[i%100], From: "u", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "hello, world"})()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			// CPU of the whole process (appenders, writer, checkpointer,
			// GC): steadier than msgs/s on a shared machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/msg")
		})
	}
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendInteractive is the storage side of `imserver bench
// --scenario interactive`: 100 senders, each alone in its group, each
// appending one message and waiting for it before the next. Every batch
// then holds at most one message per group, so each message dirties its
// group's tail page of the messages table and of the dedup index:
// pages/msg shows what the schema makes each message cost in WAL writes
// (two write calls per page) and fsynced bytes.
func BenchmarkAppendInteractive(b *testing.B) {
	for _, mode := range []struct {
		name      string
		pipelined bool
	}{{"FULL", false}, {"FULL-pipelined", true}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "FULL", PipelinedSync: mode.pipelined})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			const senders = 100
			convs := make([]string, senders)
			for i := range convs {
				convs[i] = fmt.Sprintf("g%03d", i)
				if err := db.CreateGroup(ctx, convs[i], convs[i], fmt.Sprint("u", i), nil); err != nil {
					b.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu0 := cpuTime()
			commits0, pages0, calls0 := db.w.commits.Load(), db.w.walPages.Load(), writeCalls(b)
			for s := range senders {
				n := b.N / senders
				if s < b.N%senders {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range n {
						_, _, err := db.Append(ctx, chat.Message{Conv: convs[s], From: fmt.Sprint("u", s), ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "hello, world, a message of about sixty-four bytes for the bench"})()
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			commits, pages, calls := db.w.commits.Load()-commits0, db.w.walPages.Load()-pages0, writeCalls(b)-calls0
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/msg")
			b.ReportMetric(float64(pages)/float64(b.N), "pages/msg")
			b.ReportMetric(float64(calls)/float64(b.N), "writes/msg")
			b.ReportMetric(float64(b.N)/float64(max(1, commits)), "msgs/commit")
		})
	}
}

// BenchmarkAppendTeamMix compares plain text (none) with the team mix
// (team: of every 100 appends, 10 reactions, 3 edits and 1 delete of an
// earlier message, the rest text) on the same setup, FULL. pages/msg
// counts WAL frames, the part of a commit that a mutation's extra tables
// add to; it does not move with the machine's noise as CPU figures do.
func BenchmarkAppendTeamMix(b *testing.B) {
	for _, mix := range []string{"none", "team"} {
		b.Run(mix, func(b *testing.B) { benchTeamMix(b, mix == "team") })
	}
}

func benchTeamMix(b *testing.B, team bool) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "FULL"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	convs := make([]string, 100)
	for i := range convs {
		convs[i] = fmt.Sprintf("g%03d", i)
		if err := db.CreateGroup(ctx, convs[i], convs[i], "u", nil); err != nil {
			b.Fatal(err)
		}
	}
	// Targets: 50 messages in each group, never deleted twice.
	for i := range 50 * len(convs) {
		if _, _, err := db.Append(ctx, chat.Message{Conv: convs[i%100], From: "u", ClientMsgID: fmt.Sprint("t", i), Kind: "text", Body: "hello, world"})(); err != nil {
			b.Fatal(err)
		}
	}
	var n, deletes atomic.Int64
	b.SetParallelism(256)
	b.ResetTimer()
	cpu0 := cpuTime()
	pages0, calls0 := db.w.walPages.Load(), writeCalls(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			m := chat.Message{Conv: convs[i%100], From: "u", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "hello, world"}
			target := 1 + (i/100)%50
			switch k := i % 100; {
			case !team:
			case k < 10:
				on := (i/100)%2 == 0
				m.Kind, m.Body, m.Target, m.Emoji, m.On = chat.KindReaction, "", target, "+1", &on
			case k < 13:
				m.Kind, m.Body, m.Target = chat.KindEdit, fmt.Sprint("edited ", i), target
			case k == 13:
				d := deletes.Add(1)
				if d > 50*100 {
					break
				}
				m.Conv, m.Kind, m.Body, m.Target = convs[(d-1)%100], chat.KindDelete, "", 1+(d-1)/100
			}
			if _, _, err := db.Append(ctx, m)(); err != nil && chat.ErrorCode(err) != chat.EConflict {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/msg")
	b.ReportMetric(float64(db.w.walPages.Load()-pages0)/float64(b.N), "pages/msg")
	b.ReportMetric(float64(writeCalls(b)-calls0)/float64(b.N), "writes/msg")
}

// BenchmarkAppendMutationKinds prices each kind of mutation on its own:
// in each sub-benchmark one send in seven is of that kind (the team mix's
// share of mutations), the rest plain text, from 300 appends in flight
// into 100 groups (commits of a few hundred, as the send scenario's), each
// group holding 100 texts to target first. "team" is the mix itself.
// Compare a kind's cpu-ns/msg and pages/msg with "none".
func BenchmarkAppendMutationKinds(b *testing.B) {
	for _, kind := range []string{"none", "reaction", "edit", "delete", "reply", "team"} {
		b.Run(kind, func(b *testing.B) { benchMutationKind(b, kind) })
	}
}

func benchMutationKind(b *testing.B, kind string) {
	const groups, targets = 100, 100
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: "FULL"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	convs := make([]string, groups)
	for i := range convs {
		convs[i] = fmt.Sprintf("g%03d", i)
		if err := db.CreateGroup(ctx, convs[i], convs[i], "u", nil); err != nil {
			b.Fatal(err)
		}
	}
	body := func(i int64) string { return fmt.Sprintf("%d %s", i, "the quick brown fox jumps over the lazy dog") }
	var pend []chat.Pending
	for i := range int64(targets * groups) {
		pend = append(pend, db.Append(ctx, chat.Message{Conv: convs[i%groups], From: "u", ClientMsgID: fmt.Sprint("t", i), Kind: chat.KindText, Body: body(i)}))
	}
	for _, p := range pend {
		if _, _, err := p(); err != nil {
			b.Fatal(err)
		}
	}
	var n, deletes atomic.Int64
	b.SetParallelism(150)
	b.ResetTimer()
	cpu0, pages0, commits0 := cpuTime(), db.w.walPages.Load(), db.w.commits.Load()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			m := chat.Message{Conv: convs[i%groups], From: "u", ClientMsgID: fmt.Sprint(i), Kind: chat.KindText, Body: body(i)}
			target := 1 + (i/groups)%targets
			k := kind
			switch r := i % 100; {
			case kind == "team" && r < 10:
				k = "reaction"
			case kind == "team" && r < 13:
				k = "edit"
			case kind == "team" && r == 13:
				k = "delete"
			case kind == "team" || r >= 14:
				k = "none"
			}
			switch k {
			case "reaction":
				on := (i/groups/targets)%2 == 0
				m.Kind, m.Body, m.Target, m.Emoji, m.On = chat.KindReaction, "", target, "+1", &on
			case "edit":
				m.Kind, m.Target = chat.KindEdit, target
			case "delete":
				d := deletes.Add(1)
				if d > targets*groups {
					break // every target deleted: a text instead
				}
				m.Conv, m.Kind, m.Body, m.Target = convs[(d-1)%groups], chat.KindDelete, "", 1+(d-1)/groups
			case "reply":
				m.ReplyTo = target
			}
			if _, _, err := db.Append(ctx, m)(); err != nil && chat.ErrorCode(err) != chat.EConflict {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/msg")
	b.ReportMetric(float64(db.w.walPages.Load()-pages0)/float64(b.N), "pages/msg")
	b.ReportMetric(float64(b.N)/float64(max(1, db.w.commits.Load()-commits0)), "msgs/commit")
}
