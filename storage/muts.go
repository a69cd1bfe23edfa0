package storage

import "github.com/imserver/imserver/chat"

// Unread counts the seqs past a read marker but the mutations and the
// deleted messages (migration 0014). Every message row carries muts, the
// count of its conversation's mutations up to it, itself included, and
// the conversation row the count of all: the mutations in a range of seqs
// are the difference of two counts, read with the entry (entrySelect).
// Deleted messages, and mutations stored before the migration (whose rows
// have no count), are rows of uncounted. A seq with no row at or below it
// (retention deleted them) has the count at retention's cut, muts_cut.
//
// Every process sharing the file must run this version: an older one
// writes rows without the count (docs/deploy.md, Upgrades).
//
// The writer keeps each conversation's count as committed (writer.muts),
// so that an append reads nothing for it; the counts are forgotten with
// the live set when another process committed (syncOthers), and read
// again from the conversation row.

// mutsKept bounds the counts the writer keeps: past it they are forgotten
// and read again as needed (a writer to very many conversations).
const mutsKept = 1 << 16

// mutsFor returns the count a new message of kind in c carries, counting
// it when it is a mutation. A mutation refused after its row was stored
// is uncounted again (unstore).
func (t *wtx) mutsFor(c *convTx, kind string) (int64, error) {
	if !c.mutsRead {
		if v, ok := t.w.muts[c.key]; ok {
			c.muts = v
		} else {
			st, err := t.stmt(`SELECT muts FROM conversations WHERE id = ?`)
			if err != nil {
				return 0, err
			}
			if err := st.QueryRowContext(t.ctx, c.id).Scan(&c.muts); err != nil {
				return 0, err
			}
		}
		c.mutsRead = true
	}
	if kind != chat.KindText {
		c.muts++
	}
	return c.muts, nil
}
