package server

// PresenceSettled reports whether user's contacts have been told the
// user's presence as it is now, with no announcement running: a test
// that counts presence frames waits for the one a session's opening
// starts in the background.
func (s *Server) PresenceSettled(user string) bool {
	p := s.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	want := p.count[user] > 0 || p.leaving[user] != nil
	return !p.running[user] && p.told[user] == want
}
