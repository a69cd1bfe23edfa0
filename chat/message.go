package chat

// Message kinds a client may send. Anything else is rejected so that clients
// can rely on the set.
const (
	KindText   = "text"
	KindSystem = "system"
	// Mutations (v1.1): messages with seqs of their own that change the
	// text message named by Target.
	KindEdit     = "edit"
	KindDelete   = "delete"
	KindReaction = "reaction"
)

// IsMutation reports whether kind changes another message.
func IsMutation(kind string) bool {
	return kind == KindEdit || kind == KindDelete || kind == KindReaction
}

// MaxEmojiBytes bounds a reaction's emoji (an emoji or a :name:).
const MaxEmojiBytes = 64

// Message is one stored message of a conversation.
type Message struct {
	Conv        string `json:"conv"`
	Seq         int64  `json:"seq"`
	From        string `json:"from"`
	ClientMsgID string `json:"client_msg_id"`
	Kind        string `json:"kind"`
	Body        string `json:"body"`
	TS          int64  `json:"ts"`

	// Mutations: the seq changed, and for reactions the emoji and whether
	// it is added or taken back.
	Target int64  `json:"target,omitempty"`
	Emoji  string `json:"emoji,omitempty"`
	On     *bool  `json:"on,omitempty"`
	// ReplyTo is the seq a text message answers.
	ReplyTo int64 `json:"reply_to,omitempty"`
	// Mentions are the ids of the members a text or edit body mentions.
	Mentions []string `json:"mentions,omitempty"`
	// Folded state of a text message as pulled: when it was last edited,
	// whether it was deleted (then Body is ""), its reactions by first
	// use. Live messages carry none of it.
	EditedAt  int64      `json:"edited_at,omitempty"`
	Deleted   bool       `json:"deleted,omitempty"`
	Reactions []Reaction `json:"reactions,omitempty"`
	// Attachments are the files a text message attaches, in the sender's
	// order. On the way in (Append) only their ids are set.
	Attachments []File `json:"attachments,omitempty"`

	// Origin is the session that sent the message, so that it gets `sent`
	// instead of `msg`. Empty for HTTP sends. Never stored.
	Origin string `json:"-"`
	// RetryOnly, when set, asks the store for the message stored earlier
	// under this client_msg_id and to refuse the send with RetryOnly when
	// there is none, storing nothing: a sender over its rate limit still
	// learns the seq of a retry the recent ids no longer know.
	RetryOnly *Error `json:"-"`
	// RosterV is the Version of the conversation's members as the
	// transaction that stored the message saw them. Fan-out with members
	// cached before that would reach a member kicked since, perhaps by
	// another process. Never stored.
	RosterV int64 `json:"-"`
}

// Reaction is one emoji on a message and who put it there, in order.
type Reaction struct {
	Emoji string   `json:"emoji"`
	Users []string `json:"users"`
}

// Page is a slice of a conversation's messages as the caller may see them.
type Page struct {
	Messages  []Message `json:"messages"`
	MaxSeq    int64     `json:"max_seq"`
	Completed bool      `json:"completed"`
}

// PageQuery selects a page: forward from After, or, when Backward, the
// newest messages below Before.
type PageQuery struct {
	After    int64
	Before   int64
	Backward bool
	Limit    int
}

// Page limits of the protocol.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// hidesTarget reports whether a member whose range starts at minSeq must
// get m redacted: a mutation of a message sent before it joined (or
// cleared its history).
func (m *Message) hidesTarget(minSeq int64) bool {
	return m.Target != 0 && m.Target < minSeq
}

// redacted is m as a member who cannot see its target gets it: its seq,
// kind and target stay, so the stream has no hole, but nothing of the
// target's content (an edit's new body, its mentions) goes along.
func (m Message) redacted() Message {
	m.Body = ""
	m.Mentions = nil
	m.Attachments = nil
	return m
}
