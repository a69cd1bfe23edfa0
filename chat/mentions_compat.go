package chat

// mentionsOf returns the users a message mentions. Mentions land with the
// teamwork branch (Message.Mentions); until then groups are never pushed.
func mentionsOf(m *Message) []string { return nil }
