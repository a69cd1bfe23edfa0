package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/seq"
)

// seqSource hands out seqs inside the write transaction, with the
// conversation's row locked (FOR UPDATE) by it.
type seqSource interface {
	// reserve returns the first of n new seqs of c.
	reserve(t *wtx, c *convTx, n int64) (int64, error)
	// reserveMany is reserve for several conversations (ns[i] seqs of
	// cs[i]), at once where the source can.
	reserveMany(t *wtx, cs []*convTx, ns []int64) ([]int64, []error)
}

// rowSeqs takes seqs from the locked conversation row: gapless, since the
// row's max_seq moves only with commits and no other transaction can
// append to the conversation before this one ends.
type rowSeqs struct{}

func (rowSeqs) reserve(_ *wtx, c *convTx, n int64) (int64, error) {
	first := c.next
	c.next += n
	return first, nil
}

func (r rowSeqs) reserveMany(t *wtx, cs []*convTx, ns []int64) ([]int64, []error) {
	firsts, errs := make([]int64, len(cs)), make([]error, len(cs))
	for i, c := range cs {
		firsts[i], errs[i] = r.reserve(t, c, ns[i])
	}
	return firsts, errs
}

// redisSeqs takes seqs from the shared Redis allocator, each block's bound
// persisted (seq_bound) in the write transaction before any seq of it is
// used: a block whose transaction fails was never used, and after a Redis
// flush the floor includes every stored seq. Unused seqs are gaps.
type redisSeqs struct {
	a         *seq.RedisAllocator
	downUntil *time.Time // only the writer goroutine uses it
}

func newRedisSeqs(a *seq.RedisAllocator) redisSeqs {
	return redisSeqs{a: a, downUntil: new(time.Time)}
}

var errSeqUnavailable = chat.Errorf(chat.EUnavailable, "the sequence allocator (Redis) is unavailable")

// redisRetryAfter is how long the writer stops asking a failing Redis: it
// holds the cluster's write lock while it waits.
const redisRetryAfter = time.Second

func (s redisSeqs) reserve(t *wtx, c *convTx, n int64) (int64, error) {
	if time.Now().Before(*s.downUntil) {
		return 0, errSeqUnavailable
	}
	ctx, cancel := context.WithTimeout(context.WithValue(t.ctx, wtxKey{}, t), 2*redisRetryAfter)
	defer cancel()
	first, err := s.a.Alloc(ctx, c.id, n, c.kind == chat.Direct)
	return s.check(t, c, first, err)
}

// reserveMany asks Redis for every conversation's seqs in one pipelined
// round trip (seq.RedisAllocator.AllocMany).
func (s redisSeqs) reserveMany(t *wtx, cs []*convTx, ns []int64) ([]int64, []error) {
	firsts, errs := make([]int64, len(cs)), make([]error, len(cs))
	if time.Now().Before(*s.downUntil) {
		for i := range errs {
			errs[i] = errSeqUnavailable
		}
		return firsts, errs
	}
	ctx, cancel := context.WithTimeout(context.WithValue(t.ctx, wtxKey{}, t), 2*redisRetryAfter)
	defer cancel()
	reqs := make([]seq.AllocReq, len(cs))
	for i, c := range cs {
		reqs[i] = seq.AllocReq{Conv: c.id, N: ns[i], Direct: c.kind == chat.Direct}
	}
	got, gotErrs := s.a.AllocMany(ctx, reqs)
	for i, c := range cs {
		firsts[i], errs[i] = s.check(t, c, got[i], gotErrs[i])
	}
	return firsts, errs
}

// check turns the allocator's answer for c into reserve's.
func (s redisSeqs) check(t *wtx, c *convTx, first int64, err error) (int64, error) {
	if errors.Is(err, seq.ErrUnavailable) || (errors.Is(err, context.DeadlineExceeded) && t.ctx.Err() == nil) {
		*s.downUntil = time.Now().Add(redisRetryAfter)
		return 0, errSeqUnavailable
	}
	if err == nil && first <= c.max {
		// Cannot happen while the bounds hold; never let a seq go back.
		return 0, chat.Errorf(chat.EInternal, "seq allocator went back for %s (%d <= %d)", c.id, first, c.max)
	}
	return first, err
}

type wtxKey struct{}

// txBounds implements seq.Bounds on the writer's current transaction,
// which the allocator's context carries.
type txBounds struct{}

var _ seq.Bounds = txBounds{}

func (txBounds) tx(ctx context.Context) (*wtx, error) {
	t, ok := ctx.Value(wtxKey{}).(*wtx)
	if !ok {
		return nil, errors.New("postgres: seq bounds used outside the writer")
	}
	return t, nil
}

func (b txBounds) Floor(ctx context.Context, conv string) (int64, error) {
	t, err := b.tx(ctx)
	if err != nil {
		return 0, err
	}
	var f int64
	err = t.QueryRow(`SELECT GREATEST(max_seq, seq_bound) FROM conversations WHERE id = $1`, conv).Scan(&f)
	// max_seq is written at the end of the transaction: an earlier round
	// of this one may have appended above it.
	if c := t.convs[conv]; c != nil {
		f = max(f, c.max)
	}
	return f, err
}

func (b txBounds) Persist(ctx context.Context, conv string, bound int64) error {
	t, err := b.tx(ctx)
	if err != nil {
		return err
	}
	_, err = t.Exec(`UPDATE conversations SET seq_bound = GREATEST(seq_bound, $1) WHERE id = $2`, bound, conv)
	return err
}
