package chat

// mentionsOf returns the users a message mentions (resolved by the send
// path: Message.Mentions).
func mentionsOf(m *Message) []string { return m.Mentions }
