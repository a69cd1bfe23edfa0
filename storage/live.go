package storage

// liveTexts is the writer's memory of which seqs hold a text message that
// is not deleted, one bit per seq of each conversation it appended to. A
// reaction or a reply must find its target a live text; with the bit set
// the writer needs no read of the target's row, which was a third of what
// a reaction cost it (BENCHMARKS.md, "Session 11").
//
// Only a set bit is trusted, and only to say yes: a clear bit, or a seq
// outside the window, sends the check to the row as before, which also
// gives the refusal its exact reason. So the set may forget anything at
// any time, and it does whenever it could be wrong:
//   - a bit is set once its message has committed (liveTx.added), so a
//     rolled back transaction leaves none for a seq that is then handed
//     out again;
//   - a delete clears its target's bit at once, in its transaction, so a
//     reaction later in the same batch is checked against the row, and
//     again after the commit, over the bit of a text appended in the same
//     transaction;
//   - retention, the only other statement that removes a text message,
//     empties it (a membership change leaves it: the sender's visible
//     range is read in the transaction and checked before the set);
//   - a transaction that finds the database changed by another connection
//     or process (PRAGMA data_version) starts from an empty set.
type liveTexts struct {
	convs map[int64]*liveConv // by conversation key
	words int                 // bits words held in all
}

// liveConv holds the bits of one conversation from seq lo on.
type liveConv struct {
	lo   int64 // a multiple of 64
	bits []uint64
}

const (
	// liveConvWords bounds one conversation's window: its newest 64Ki
	// seqs, older ones being the rare target.
	liveConvWords = 1 << 10
	// liveWords bounds the whole set (1 MiB); past it the set starts
	// over. Only a writer appending to very many conversations gets there.
	liveWords = 1 << 17
)

func newLiveTexts() *liveTexts { return &liveTexts{convs: make(map[int64]*liveConv)} }

// has reports whether seq of conv is known to be a live text message.
func (l *liveTexts) has(conv, seq int64) bool {
	c := l.convs[conv]
	if c == nil || seq < c.lo {
		return false
	}
	i := (seq - c.lo) / 64
	return i < int64(len(c.bits)) && c.bits[i]&(1<<((seq-c.lo)%64)) != 0
}

// forget clears seq's bit.
func (l *liveTexts) forget(conv, seq int64) {
	c := l.convs[conv]
	if c == nil || seq < c.lo {
		return
	}
	if i := (seq - c.lo) / 64; i < int64(len(c.bits)) {
		c.bits[i] &^= 1 << ((seq - c.lo) % 64)
	}
}

// add sets seq's bit: a text message of conv committed with that seq.
func (l *liveTexts) add(conv, seq int64) {
	c := l.convs[conv]
	if c == nil {
		c = &liveConv{lo: seq - seq%64}
		l.convs[conv] = c
	}
	if seq < c.lo {
		return // older than the window
	}
	i := int((seq - c.lo) / 64)
	if i >= liveConvWords {
		// Slide the window so that seq is in its last word.
		drop := min(i-liveConvWords+1, len(c.bits))
		l.words -= drop
		c.bits = append(c.bits[:0], c.bits[drop:]...)
		c.lo += int64(i-liveConvWords+1) * 64
		i = liveConvWords - 1
	}
	for len(c.bits) <= i {
		c.bits = append(c.bits, 0)
		l.words++
	}
	c.bits[i] |= 1 << ((seq - c.lo) % 64)
	if l.words > liveWords {
		l.reset()
	}
}

// liveTx is what one transaction does to the live set: the texts it
// appended, set after its commit, and what it took out, taken out at once
// and again after those.
type liveTx struct {
	added   [][2]int64 // (conversation key, seq)
	removed [][2]int64
	emptied bool // retention removed messages
}

// forget clears seq of conv now and after the commit.
func (x *liveTx) forget(l *liveTexts, conv, seq int64) {
	l.forget(conv, seq)
	x.removed = append(x.removed, [2]int64{conv, seq})
}

// reset empties the set now and after the commit.
func (x *liveTx) reset(l *liveTexts) {
	l.reset()
	x.emptied = true
}

// committed applies t's changes once it has committed.
func (l *liveTexts) committed(t *wtx) {
	if t.live.emptied {
		l.reset()
		return
	}
	for _, k := range t.live.added {
		l.add(k[0], k[1])
	}
	for _, k := range t.live.removed {
		l.forget(k[0], k[1])
	}
}

// reset forgets everything.
func (l *liveTexts) reset() {
	clear(l.convs)
	l.words = 0
}

// syncOthers forgets what the writer remembers of the file (the live set,
// the mutation counts) when another connection or process committed since
// it last looked: it may have deleted a message or stored a mutation.
// PRAGMA data_version moves for every commit but this connection's own.
func (t *wtx) syncOthers() error {
	st, err := t.stmt(`PRAGMA data_version`)
	if err != nil {
		return err
	}
	var v int64
	if err := st.QueryRowContext(t.ctx).Scan(&v); err != nil {
		return err
	}
	if w := t.w; v != w.dataVersion {
		w.live.reset()
		w.members.reset()
		clear(w.muts)
		w.dataVersion = v
	}
	return nil
}
