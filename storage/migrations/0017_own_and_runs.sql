-- A member's own text messages past its read marker (PROTOCOL.md: unread
-- counts the text messages of others). Until this version a send moved the
-- sender's read marker over its own message, so no member has any yet.
ALTER TABLE members ADD COLUMN own_unread INTEGER NOT NULL DEFAULT 0;

-- Reactions are ordered by first use: run is the seq of the reaction
-- message that made the emoji's entry on its target appear (a reaction
-- joining an entry takes the entry's run), so the entry keeps its place
-- while anyone still reacts with it. Rows stored before have the oldest
-- seq of their entry, the order they were shown in until now.
ALTER TABLE reactions ADD COLUMN run INTEGER;
UPDATE reactions SET run = (SELECT MIN(r.seq) FROM reactions r
	WHERE r.conv_id = reactions.conv_id AND r.target = reactions.target AND r.emoji = reactions.emoji);
