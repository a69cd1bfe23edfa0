-- Unread counts the seqs past a read marker but mutations and deleted
-- messages. Mutations (edits, deletes, reactions: one send in seven in a
-- team) were rows of uncounted, one more b-tree insert and one more page
-- per mutation for the writer. From now on every message carries the
-- running count of its conversation's mutations up to it (muts), and the
-- conversation its total: the mutations in a range of seqs are a
-- difference of two counts. uncounted keeps the deleted messages, and the
-- mutations stored before this migration (their rows have no muts: none
-- of the counted mutations comes before them).
--
-- Retention deletes a conversation's oldest rows; muts_cut keeps the
-- count at its cut, the count of any seq whose rows are gone.
ALTER TABLE messages ADD COLUMN muts INTEGER;
ALTER TABLE conversations ADD COLUMN muts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conversations ADD COLUMN muts_cut INTEGER NOT NULL DEFAULT 0;
