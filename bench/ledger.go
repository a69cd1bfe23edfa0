package bench

import "sync"

// ledger is what the server confirmed as durably stored (`sent` answers), per
// conversation: which session sent each seq. It is the truth the receivers are
// checked against.
type ledger struct {
	mu    sync.Mutex
	convs map[string]*convLedger
}

type convLedger struct {
	senders []int32 // senders[seq] = sending session id + 1; 0 = no confirmed message
	count   int
}

func newLedger() *ledger { return &ledger{convs: map[string]*convLedger{}} }

// confirm records a `sent`; it reports false if the seq was already confirmed
// (a retry answered as duplicate, or a seq handed out twice).
func (l *ledger) confirm(conv string, seq int64, sender int) (first bool, clash bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.convs[conv]
	if c == nil {
		c = &convLedger{}
		l.convs[conv] = c
	}
	for int64(len(c.senders)) <= seq {
		c.senders = append(c.senders, make([]int32, max(64, len(c.senders)))...)
	}
	switch c.senders[seq] {
	case 0:
		c.senders[seq] = int32(sender + 1)
		c.count++
		return true, false
	case int32(sender + 1):
		return false, false
	default:
		return false, true // two senders were told they own the same seq
	}
}

// snapshot returns a conversation's ledger; call it once sending is over.
func (l *ledger) get(conv string) *convLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.convs[conv]; c != nil {
		return c
	}
	return &convLedger{}
}

// bitset is a growable set of seqs; seqs are dense per conversation.
type bitset []uint64

func (b *bitset) add(i int64) (added bool) {
	w := int(i >> 6)
	for len(*b) <= w {
		*b = append(*b, make([]uint64, max(4, len(*b)))...)
	}
	m := uint64(1) << (uint(i) & 63)
	if (*b)[w]&m != 0 {
		return false
	}
	(*b)[w] |= m
	return true
}

func (b bitset) has(i int64) bool {
	w := int(i >> 6)
	return w < len(b) && b[w]&(uint64(1)<<(uint(i)&63)) != 0
}

// recvState is one session's view of one conversation.
type recvState struct {
	conv      string
	convBytes []byte // conv, for messages that leave out their conv
	convJSON  []byte
	have      bitset // seqs received, live or pulled
	mine      bitset // seqs this session sent (never delivered to it)
	own       int    // len(mine)
	contig    int64  // every seq up to here is held, mine, or known not to exist: where a pull resumes
	liveLast  int64  // last seq on the live path of the current connection
	acked     int64  // last ack sent

	resynced bool // live delivery was cut at least once
	syncing  bool // a sync chain is running
	again    bool // another cut arrived while syncing

	mix *teamConv // the team mix's state, nil until used
}

// advance moves contig past what is now held.
func (st *recvState) advance() {
	for st.have.has(st.contig+1) || st.mine.has(st.contig+1) {
		st.contig++
	}
}
