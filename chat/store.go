package chat

import "context"

// Store is the durable state of imserver. Every method that changes state
// returns only after the change is committed. Implementations return *Error
// with ENotFound, EConflict or ENotMember where the protocol names them.
type Store interface {
	UserStore
	ConversationStore
	MessageStore
	InviteStore
	AdminStore
	NotifyStore
}

// UserStore holds accounts and their tokens. Passwords and tokens reach it
// only as hashes.
type UserStore interface {
	CreateUser(ctx context.Context, u User, passwordHash string) error
	UserByID(ctx context.Context, id string) (User, error)
	// UserByName returns the user and its password hash.
	UserByName(ctx context.Context, username string) (User, string, error)
	SearchUsers(ctx context.Context, prefix string, limit int) ([]User, error)
	SetPassword(ctx context.Context, userID, passwordHash string) error
	// DeleteUser removes the account and its tokens and ends its memberships;
	// its messages stay.
	DeleteUser(ctx context.Context, userID string) error

	// CreateToken stores a token as a session; sess gives its id and
	// client (its TokenHash is tokenHash).
	CreateToken(ctx context.Context, userID string, tokenHash []byte, sess Session) error
	UserByToken(ctx context.Context, tokenHash []byte) (User, error)
	// SessionByToken returns the token's user and session (TokenHash set).
	SessionByToken(ctx context.Context, tokenHash []byte) (User, Session, error)
	DeleteToken(ctx context.Context, tokenHash []byte) error
	DeleteUserTokens(ctx context.Context, userID string) error

	// Sessions lists a user's sessions (TokenHash set).
	Sessions(ctx context.Context, userID string) ([]Session, error)
	// DeleteSession deletes the user's session id and returns its token
	// hash; ENotFound when the user has no such session.
	DeleteSession(ctx context.Context, userID, id string) ([]byte, error)
	// DeleteOtherSessions deletes every session of the user but keep's and
	// returns their token hashes.
	DeleteOtherSessions(ctx context.Context, userID string, keep []byte) ([][]byte, error)
	// ChangePassword sets the password hash and deletes every other
	// session in one transaction; it returns their token hashes.
	ChangePassword(ctx context.Context, userID, passwordHash string, keep []byte) ([][]byte, error)
	// TouchSessions records the latest uses of tokens (one write for all).
	TouchSessions(ctx context.Context, uses []SessionUse) error
	// DeleteExpiredSessions deletes the tokens last used before usedBefore
	// or created before createdBefore (0: no such bound).
	DeleteExpiredSessions(ctx context.Context, usedBefore, createdBefore int64) error

	// CreateTicket stores a one-time WebSocket ticket of a session.
	CreateTicket(ctx context.Context, hash []byte, userID string, tokenHash []byte, expiresAt int64) error
	// UseTicket marks an unused ticket not expired at now as used, in one
	// conditional write (one use holds under races), and returns the
	// token hash it was issued for; ENotFound otherwise.
	UseTicket(ctx context.Context, hash []byte, now int64) ([]byte, error)
	// TicketToken returns the token hash of an unused ticket not expired
	// at now, without using it; ENotFound otherwise.
	TicketToken(ctx context.Context, hash []byte, now int64) ([]byte, error)

	// WriteHealth is nil while writes succeed, and the EUnavailable error
	// writes are answered with while they fail (disk full, read-only, I/O).
	WriteHealth() error
}

// ConversationStore holds conversations, member rows and the per-user
// version counters of the conversation set.
type ConversationStore interface {
	// CreateDirect returns the direct conversation of the pair, creating it
	// with id when it does not exist yet.
	CreateDirect(ctx context.Context, id, a, b string) (conv string, created bool, err error)
	CreateGroup(ctx context.Context, id, name, owner string, members []string) error
	// AddMembers makes users members from the conversation's max_seq+1 on;
	// users already members are left alone. It returns the users added.
	AddMembers(ctx context.Context, conv string, users []string) ([]string, error)
	// RemoveMember ends user's visible range at the conversation's max_seq
	// (leaving).
	RemoveMember(ctx context.Context, conv, user string) error
	// KickMember is RemoveMember done by by, if CheckRemove allows it with
	// the roles as they stand in the store's transaction (ENotMember when
	// by is not a member, ENotFound when user is not).
	KickMember(ctx context.Context, conv, by, user string) error
	// SetRole gives user, a current member, role, if CheckSetRole allows it
	// with by's role as it stands in the transaction (ENotMember when by is
	// not a member, ENotFound when user is not). Making user owner makes by
	// an admin in the same transaction: a group has one owner.
	SetRole(ctx context.Context, conv, by, user, role string) error
	// RenameGroup names a group name, if CheckRename allows it with by's
	// role as it stands in the transaction (ENotMember when by is not a
	// member); every member's entry gets a new version.
	RenameGroup(ctx context.Context, conv, by, name string) error
	ClearHistory(ctx context.Context, conv, user string) error
	// SetRead moves user's read marker up to seq (clamped to what it may
	// see) and returns the marker after the call and whether it moved.
	SetRead(ctx context.Context, conv, user string, seq int64) (int64, bool, error)
	// SaveAcks stores cumulative receive acks; each only moves forward.
	SaveAcks(ctx context.Context, acks []Ack) error

	// Membership returns user's member row of conv, also after it left;
	// ENotFound when conv does not exist, ENotMember when user never joined.
	Membership(ctx context.Context, conv, user string) (Membership, error)
	// Roster returns the kind and the current members (not those who left).
	Roster(ctx context.Context, conv string) (Roster, error)
	Conversation(ctx context.Context, conv, user string) (Conversation, error)
	ConversationsSince(ctx context.Context, user string, since int64, limit int) (Changes, error)
	MaxVersion(ctx context.Context, user string) (int64, error)
	// Contacts lists the users who are members of a conversation user is a
	// member of (not user itself), leaving out conversation except ("" for
	// none): who knew user before it came to share except with them.
	Contacts(ctx context.Context, user, except string) ([]string, error)
	// ContactsEver lists the current members of every conversation user
	// is or was a member of (not user itself): whoever may have been told
	// user was online, even if user has left (or been removed) since.
	ContactsEver(ctx context.Context, user string) ([]string, error)
}

// MessageStore holds messages.
type MessageStore interface {
	// Append queues m to be stored with the next seq of its conversation
	// and returns a function that waits until it is durable and returns it;
	// or returns the message stored earlier with the same (conv, from,
	// client_msg_id) and duplicate true. Messages queued one after another
	// commit in that order, so a session can pipeline its sends. Committed
	// messages are also handed, in seq order, to the commit hook the store
	// was built with.
	Append(ctx context.Context, m Message) Pending
	// Messages returns a page of what user may see of conv.
	Messages(ctx context.Context, conv, user string, q PageQuery) (Page, error)
	// Search returns the text messages user may see whose current body
	// matches q, newest first; ENotFound or ENotMember for a q.Conv the
	// user cannot search.
	Search(ctx context.Context, user string, q SearchQuery) (SearchResults, error)
}

// Pending waits for a queued message and returns it as stored, whether it
// was a duplicate, or why it failed.
type Pending func() (Message, bool, error)

// Ack is a cumulative receive ack of one member.
type Ack struct {
	Conv string
	User string
	Seq  int64
}

// Deliverer hands events to the online sessions of users. It must not
// block: a session that cannot take an event is cut, not waited for, because
// storage is the truth and push is only a hint.
type Deliverer interface {
	Deliver(users []string, ev *Event)
	// DeliverAll hands out deliveries made together, in order (the
	// messages of one commit). A deliverer may queue all of them before
	// waking any session's writer, so that each session's share leaves in
	// one write instead of one per message.
	DeliverAll(ds []Delivery)
}

// Delivery is one event and the users who get it.
type Delivery struct {
	Users []string
	Event *Event
}

// Event types pushed to sessions.
const (
	EventMessage      = "msg"
	EventRead         = "read"
	EventReceipt      = "receipt"
	EventConversation = "conversation"
	EventStorm        = "storm"
	EventBatch        = "batch"
)

// Event is something that happened which online sessions should hear of.
type Event struct {
	Type string
	Conv string
	// ExceptSession is not sent the event (the session that caused it).
	ExceptSession string

	Message *Message // msg
	Seq     int64    // read, receipt
	User    string   // receipt: who read; typing, presence: who

	Reads        []Read        // receipt in groups: every reader of the interval
	Conversation *Conversation // conversation
	Active       bool          // storm; presence: online
	Count        int           // storm
	WindowMS     int64         // storm
	// Messages of one conversation in seq order (batch). Each keeps its
	// Origin: that session already has it (`sent`) and must not get it again.
	Messages []Message
}

// Read is one member's read marker.
type Read struct {
	User string `json:"user"`
	Seq  int64  `json:"seq"`
}
