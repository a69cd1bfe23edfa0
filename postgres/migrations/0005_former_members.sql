-- Former members (max_seq set: they left or were kicked) by conversation:
-- an edit or delete of a message in a former member's range gives that
-- member's entry a new version (its pulls fold the change, and its
-- last_message, unread and mentions may follow it), and the writer finds
-- those rows here instead of reading every member of a big group.
CREATE INDEX members_former ON members (conv_id, max_seq) WHERE max_seq IS NOT NULL;
