-- Every change of a conversation's members (a join, a leave or kick, a
-- role, a cleared history) counts here, in the transaction that makes it.
-- A committed message carries the count its transaction saw, so that the
-- fan-out of any process sharing the database knows when the members it
-- has cached are older than the message: a member kicked by another
-- process is never delivered what was committed after the kick.
ALTER TABLE conversations ADD COLUMN roster_v INTEGER NOT NULL DEFAULT 0;
