-- Every change of a conversation's members counts here (see storage's
-- migration 0015): a committed message carries the count its transaction
-- saw, so that a node's fan-out knows when its cached members are older.
ALTER TABLE conversations ADD COLUMN roster_v BIGINT NOT NULL DEFAULT 0;
