package chat

// Message kinds a client may send. Anything else is rejected so that clients
// can rely on the set.
const (
	KindText   = "text"
	KindSystem = "system"
)

// Message is one stored message of a conversation.
type Message struct {
	Conv        string `json:"conv"`
	Seq         int64  `json:"seq"`
	From        string `json:"from"`
	ClientMsgID string `json:"client_msg_id"`
	Kind        string `json:"kind"`
	Body        string `json:"body"`
	TS          int64  `json:"ts"`
	// Attachments are the files a text message attaches, in the sender's
	// order. On the way in (Append) only their ids are set.
	Attachments []File `json:"attachments,omitempty"`

	// Origin is the session that sent the message, so that it gets `sent`
	// instead of `msg`. Empty for HTTP sends. Never stored.
	Origin string `json:"-"`
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
