package seq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRedisQueue(t *testing.T) {
	r := startRedis(t)
	c := r.client()
	n := 0
	testQueue(t, func(t *testing.T, capacity int, ttl time.Duration, clock *fakeClock) Queue {
		n++ // a prefix per subtest keeps them apart on the one server
		q := NewRedisQueue(c, fmt.Sprintf("t%d:", n), capacity, ttl)
		q.now = clock.now
		return q
	})
}

func TestRedisQueueKeyExpires(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := r.client()
	q := NewRedisQueue(c, "x:", 10, 5*time.Second)
	if _, err := q.Push(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, "x:q:{k}").Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Errorf("key TTL = %v, want (0, 5s]", ttl)
	}
	if _, err := q.Take(ctx, "k", 10); err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, "x:q:{k}").Val() != 0 {
		t.Error("key left behind after the last entry was taken")
	}
}

func TestRedisQueueUnavailable(t *testing.T) {
	r := startRedis(t)
	q := NewRedisQueue(r.client(), "u:", 10, time.Second)
	r.kill()
	ctx := context.Background()
	if _, err := q.Push(ctx, "k", []byte("a")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Push: %v, want ErrUnavailable", err)
	}
	if _, err := q.Take(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Take: %v, want ErrUnavailable", err)
	}
	if _, err := q.Len(ctx, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Len: %v, want ErrUnavailable", err)
	}
}
