package chat

import "strings"

// mentionAll mentions every member of a group.
const mentionAll = "all"

// mentions resolves the @names of body into member ids, in order of first
// appearance, each once: `@username` of a current member (ignoring case)
// and, in groups, `@all` (every member but the sender). An @ inside a word
// (an e-mail address) mentions no one.
func mentions(r *cachedRoster, from, body string) []string {
	if r == nil || strings.IndexByte(body, '@') < 0 {
		return nil
	}
	var ids []string
	add := func(id string) {
		for _, x := range ids {
			if x == id {
				return
			}
		}
		ids = append(ids, id)
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '@' || (i > 0 && isNameByte(body[i-1])) {
			continue
		}
		j := i + 1
		for j < len(body) && isNameByte(body[j]) {
			j++
		}
		name := body[i+1 : j]
		// A sentence may end right after a name: "thanks @bob."
		for name != "" {
			if strings.EqualFold(name, mentionAll) && r.Kind == Group {
				for _, m := range r.Members {
					if m.UserID != from {
						add(m.UserID)
					}
				}
				break
			}
			if id := r.byName(name); id != "" {
				add(id)
				break
			}
			if !strings.HasSuffix(name, ".") && !strings.HasSuffix(name, "-") {
				break
			}
			name = name[:len(name)-1]
		}
		i = j - 1
	}
	return ids
}

// isNameByte reports whether c may appear in a username.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}

// byName returns the id of the current member called name (ignoring case).
func (r *cachedRoster) byName(name string) string {
	for i := range r.Members {
		if strings.EqualFold(r.Members[i].Username, name) {
			return r.Members[i].UserID
		}
	}
	return ""
}
