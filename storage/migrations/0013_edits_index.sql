-- The index of mutations by target is read for one thing: a delete finds
-- the edits of its target to erase their bodies. Reactions (most
-- mutations) and deletes were indexed too, each an index entry written
-- in its conversation's leaf; now only edits are. (A full scan of
-- messages, once: about 1 s per million messages.)
DROP INDEX messages_targets;
CREATE INDEX messages_edits ON messages (conv, target) WHERE kind = 'edit';
