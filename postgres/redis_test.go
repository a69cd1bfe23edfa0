package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/redistest"
	"github.com/imserver/imserver/storage/storetest"
	"github.com/redis/go-redis/v9"
)

// startRedis runs a redis-server of the test's own on a free port.
func startRedis(t *testing.T) *redis.Client { return redistest.Client(t) }

// TestContractRedisSeqs runs the store contract with seqs from Redis
// blocks whose bounds are persisted in the write transaction.
func TestContractRedisSeqs(t *testing.T) {
	rdb := startRedis(t)
	n := 0
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		url := pg.NewDB(t)
		n++
		prefix := fmt.Sprintf("t%d:", n)
		return func(t *testing.T, o storetest.Options) (chat.Store, func()) {
			db, err := Open(context.Background(), url, Options{BatchDelay: o.BatchDelay, OnCommit: o.OnCommit, Redis: rdb, RedisPrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return db, func() { db.Close() }
		}
	})
}

// TestRedisSeqsNeverGoBack: after Redis loses its keys, seqs resume above
// every seq stored and every bound persisted, never repeating one.
func TestRedisSeqsNeverGoBack(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	db := openTest(t, pg.NewDB(t), Options{Redis: rdb, RedisPrefix: "x:"})
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 30 {
		if i == 10 || i == 20 {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "x"})()
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq <= last {
			t.Fatalf("seq %d after %d", m.Seq, last)
		}
		last = m.Seq
	}
	var bound int64
	if err := db.pool.QueryRow(ctx, `SELECT seq_bound FROM conversations WHERE id = 'g'`).Scan(&bound); err != nil {
		t.Fatal(err)
	}
	if bound < last {
		t.Errorf("persisted bound %d below the last seq %d", bound, last)
	}
}
