package storage

import (
	"context"
	"errors"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/seq"
)

// seqSource hands out seqs inside the writer's transaction, so that seqs
// follow commit order even across processes (BEGIN IMMEDIATE serialises
// the writers of every process).
type seqSource interface {
	// reserve returns the first of n new seqs of conv.
	reserve(t *wtx, conv string, n int64) (int64, error)
	// settle says that of the seqs reserved up to end, only those up to
	// used were stored (the rest were duplicates).
	settle(conv string, end, used int64)
	// rollback says that the transaction that reserved seqs of conv failed.
	rollback(conv string)
}

// floorQuery is the largest seq ever handed out for a conversation: the
// stored maximum, or above it the bound of a Redis block.
const floorQuery = `SELECT MAX(max_seq, seq_bound), kind FROM conversations WHERE id = ?`

func floor(ctx context.Context, t *wtx, conv string) (int64, string, error) {
	st, err := t.stmt(floorQuery)
	if err != nil {
		return 0, "", err
	}
	var n int64
	var kind string
	err = st.QueryRowContext(ctx, conv).Scan(&n, &kind)
	return n, kind, err
}

// localSeqs is the in-process allocator: gapless, since the counters move
// only with commits.
type localSeqs struct{ l *seq.Local }

func (s localSeqs) reserve(t *wtx, conv string, n int64) (int64, error) {
	return s.l.Next(conv, n, func() (int64, error) {
		f, _, err := floor(t.ctx, t, conv)
		// The stored max_seq moves only at the end of the transaction: an
		// earlier round of this one may have appended above it.
		if c := t.convs[conv]; c != nil {
			f = max(f, c.max)
		}
		return f, err
	})
}

func (s localSeqs) settle(conv string, end, used int64) { s.l.Return(conv, end, used) }
func (s localSeqs) rollback(conv string)                { s.l.Forget(conv) }

// redisSeqs takes seqs from the shared Redis allocator. The bound of each
// block is persisted in the same transaction as the messages (txBounds):
// a block whose transaction fails was never used by anyone, and the floor
// after a Redis flush includes every stored seq. Unused seqs are gaps.
//
// The writer holds the database's write lock (for every process) while it
// waits for Redis, so after a failure it does not ask Redis again for a
// second: sends fail fast instead of stalling every other write.
type redisSeqs struct {
	a         *seq.RedisAllocator
	downUntil *time.Time // only the writer goroutine uses it
}

func newRedisSeqs(a *seq.RedisAllocator) redisSeqs {
	return redisSeqs{a: a, downUntil: new(time.Time)}
}

var errSeqUnavailable = chat.Errorf(chat.EUnavailable, "the sequence allocator (Redis) is unavailable")

// redisRetryAfter is how long the writer stops asking a failing Redis.
const redisRetryAfter = time.Second

func (s redisSeqs) reserve(t *wtx, conv string, n int64) (int64, error) {
	if time.Now().Before(*s.downUntil) {
		return 0, errSeqUnavailable
	}
	_, kind, err := floor(t.ctx, t, conv)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.WithValue(t.ctx, wtxKey{}, t), 2*redisRetryAfter)
	defer cancel()
	first, err := s.a.Alloc(ctx, conv, n, kind == chat.Direct)
	if errors.Is(err, seq.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		*s.downUntil = time.Now().Add(redisRetryAfter)
		return 0, errSeqUnavailable
	}
	return first, err
}

func (redisSeqs) settle(string, int64, int64) {}
func (redisSeqs) rollback(string)             {}

type wtxKey struct{}

// txBounds implements seq.Bounds on the writer's current transaction,
// which the allocator's context carries.
type txBounds struct{}

var _ seq.Bounds = txBounds{}

func (txBounds) tx(ctx context.Context) (*wtx, error) {
	t, ok := ctx.Value(wtxKey{}).(*wtx)
	if !ok {
		return nil, errors.New("storage: seq bounds used outside the writer")
	}
	return t, nil
}

func (b txBounds) Floor(ctx context.Context, conv string) (int64, error) {
	t, err := b.tx(ctx)
	if err != nil {
		return 0, err
	}
	f, _, err := floor(ctx, t, conv)
	return f, err
}

func (b txBounds) Persist(ctx context.Context, conv string, bound int64) error {
	t, err := b.tx(ctx)
	if err != nil {
		return err
	}
	st, err := t.stmt(`UPDATE conversations SET seq_bound = MAX(seq_bound, ?) WHERE id = ?`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, bound, conv)
	return err
}

// seqRange is what one batch reserved for one conversation.
type seqRange struct {
	next, end int64
	err       error // the reservation failed: the conversation's messages fail
}
