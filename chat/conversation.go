package chat

// Conversation kinds.
const (
	Direct = "direct"
	Group  = "group"
)

// Member roles.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// The rules of roles, checked by the service against its cached member
// list and again by the stores inside the transaction that acts, so that
// a role changed meanwhile (on this process or another) is what counts.

// CheckRemove says whether a member of role mine may remove one of role
// target from a group: the owner and admins may (PROTOCOL.md: "owner/admin
// only"), but nobody removes the owner, who leaves instead.
func CheckRemove(mine, target string) error {
	switch {
	case mine != RoleOwner && mine != RoleAdmin:
		return Errorf(EForbidden, "only the owner or an admin can remove members")
	case target == RoleOwner:
		return Errorf(EForbidden, "the owner cannot be removed (an owner leaves, or hands over the group first)")
	}
	return nil
}

// CheckRename says whether a member of role mine may rename a group: the
// owner and admins, who manage it.
func CheckRename(mine string) error {
	if mine == RoleOwner || mine == RoleAdmin {
		return nil
	}
	return Errorf(EForbidden, "only the owner or an admin can rename the group")
}

// CheckSetRole says whether by, of role mine, may give user role.
func CheckSetRole(by, mine, user, role string) error {
	switch role {
	case RoleOwner, RoleAdmin, RoleMember:
	default:
		return Errorf(EBadRequest, "role must be owner, admin or member")
	}
	if mine != RoleOwner {
		return Errorf(EForbidden, "only the owner can change roles")
	}
	if user == by {
		return Errorf(EBadRequest, "the owner hands the group over by making another member owner")
	}
	return nil
}

// Conversation is one user's entry of a conversation: the shared fields plus
// the caller's own range, markers and version.
type Conversation struct {
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	Name         string `json:"name"`
	MembersCount int    `json:"members_count"`
	MaxSeq       int64  `json:"max_seq"`
	MinSeq       int64  `json:"min_seq"`
	ReadSeq      int64  `json:"read_seq"`
	LastAckSeq   int64  `json:"last_ack_seq"`
	Unread       int64  `json:"unread"`
	// Mentions counts the caller's unread messages that mention it.
	Mentions    int64    `json:"mentions"`
	Version     int64    `json:"version"`
	Role        string   `json:"role"`
	Left        bool     `json:"left"`
	Peer        *User    `json:"peer,omitempty"`
	LastMessage *Message `json:"last_message,omitempty"`
	// MutedUntil is when the caller's mute ends (ms; MuteForever until
	// unmuted), 0 when not muted.
	MutedUntil int64 `json:"muted_until"`
}

// Member is a current member of a conversation as GET .../members lists it.
type Member struct {
	UserID      string `json:"user_id"`
	Username    string `json:"username"`
	DisplayName string `json:"display_name"`
	Role        string `json:"role"`
	LastAckSeq  int64  `json:"last_ack_seq"`
	ReadSeq     int64  `json:"read_seq"`
	// MinSeq is the first seq the member may see; fan-out checks it because
	// the dispatcher may deliver a message committed before the member
	// joined after the roster already shows it.
	MinSeq int64 `json:"-"`
}

// Membership is what the domain needs to know of one member row to decide
// what the user may see and do.
type Membership struct {
	Conv   string
	Kind   string
	User   string
	Role   string
	MinSeq int64
	// MaxSeq is the last seq the user may see after leaving or being
	// kicked; 0 while the user is a member.
	MaxSeq int64
	Left   bool
}

// Changes is a page of the incremental conversation sync.
type Changes struct {
	Conversations []Conversation `json:"conversations"`
	MaxVersion    int64          `json:"max_version"`
	Completed     bool           `json:"completed"`
}

// Roster is a conversation's kind and current members.
type Roster struct {
	Conv    string
	Kind    string
	Members []Member
	// Version counts the changes of who the members are (a join, a leave
	// or kick): a message committed after a change carries at least its
	// count (Message.RosterV).
	Version int64
}

// Has reports whether user is a current member.
func (r *Roster) Has(user string) bool {
	for i := range r.Members {
		if r.Members[i].UserID == user {
			return true
		}
	}
	return false
}

// Role returns user's role, or "" when it is not a member.
func (r *Roster) Role(user string) string {
	for i := range r.Members {
		if r.Members[i].UserID == user {
			return r.Members[i].Role
		}
	}
	return ""
}

// UserIDs lists the current members' ids.
func (r *Roster) UserIDs() []string {
	ids := make([]string, len(r.Members))
	for i := range r.Members {
		ids[i] = r.Members[i].UserID
	}
	return ids
}
