package storage

// memberRows is the writer's memory of the member rows it read to check
// senders (writer.reserve): who may send to a conversation, with the row's
// visible range, role and the conversation's roster version. With one
// message in flight per sender, a batch holds as many senders as messages,
// and reading each sender's row was a sixth of the writer's time per
// message (BENCHMARKS.md, "Session 15").
//
// An entry is only trusted to say "a member, with these values"; a miss
// reads the row as before, which also gives a refusal its reason. The
// memory is emptied whenever it could be wrong:
//   - rows read in a transaction are remembered once it has committed
//     (memberRows.committed), so a rolled back one leaves nothing;
//   - a function job empties it before it runs, and drops the rows the
//     transaction read before it, unless the job says it leaves every
//     member's visible range and role, every conversation's roster
//     version and every key alone (writer.execKeepingMembers: read
//     markers and acks, the dedup and search jobs). Joins, kicks, leaves,
//     clears, roles, retention and anything new are thus safe by default;
//   - a transaction that finds the database changed by another connection
//     or process (PRAGMA data_version, syncOthers) starts from an empty
//     memory.
type memberRows struct {
	rows map[[2]string]memberRow // by (conversation, user)
}

// memberRow is what a sender's check reads of its member row: where its
// visible range starts (mutations and replies may not reach before it),
// its role (who may delete others' messages), the conversation's count of
// member changes then (chat.Message.RosterV), and the integer keys of the
// conversation and the user.
type memberRow struct {
	minSeq           int64
	role             string
	rosterV          int64
	convKey, userKey int64
}

// memberRowsKept bounds the memory: past it, it starts over.
const memberRowsKept = 1 << 16

func newMemberRows() *memberRows { return &memberRows{rows: make(map[[2]string]memberRow)} }

// reset forgets every row.
func (m *memberRows) reset() { clear(m.rows) }

// committed remembers the rows t read, once t has committed.
func (m *memberRows) committed(t *wtx) {
	if len(m.rows)+len(t.memberReads) > memberRowsKept {
		m.reset()
	}
	for _, s := range t.memberReads {
		m.rows[[2]string{s.conv, s.user}] = s.memberRow
	}
}

// use fills s from the remembered row; false when there is none.
func (m *memberRows) use(s *senderTx) bool {
	r, ok := m.rows[[2]string{s.conv, s.user}]
	if !ok {
		return false
	}
	s.memberRow = r
	return true
}
