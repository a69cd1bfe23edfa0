-- A member's own text messages past its read marker, and the reactions'
-- order by first use: see storage's migration 0017.
ALTER TABLE members ADD COLUMN own_unread BIGINT NOT NULL DEFAULT 0;
ALTER TABLE reactions ADD COLUMN run BIGINT;
UPDATE reactions SET run = (SELECT MIN(r.seq) FROM reactions r
	WHERE r.conv_id = reactions.conv_id AND r.target = reactions.target AND r.emoji = reactions.emoji);
