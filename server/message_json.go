package server

import (
	"encoding/json"
	"strconv"

	"github.com/imserver/imserver/chat"
)

// appendMessage appends m as encoding/json would encode it, without
// reflection: every message is encoded once for its recipients and once
// for its sender's `sent`, on the hot path.
func appendMessage(b []byte, m *chat.Message) []byte {
	b = append(b, `{"conv":`...)
	b = appendString(b, m.Conv)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, m.Seq, 10)
	b = append(b, `,"from":`...)
	b = appendString(b, m.From)
	b = append(b, `,"client_msg_id":`...)
	b = appendString(b, m.ClientMsgID)
	b = append(b, `,"kind":`...)
	b = appendString(b, m.Kind)
	b = append(b, `,"body":`...)
	b = appendString(b, m.Body)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, m.TS, 10)
	if m.Target != 0 {
		b = append(b, `,"target":`...)
		b = strconv.AppendInt(b, m.Target, 10)
	}
	if m.Emoji != "" {
		b = append(b, `,"emoji":`...)
		b = appendString(b, m.Emoji)
	}
	if m.On != nil {
		b = append(b, `,"on":`...)
		b = strconv.AppendBool(b, *m.On)
	}
	if m.ReplyTo != 0 {
		b = append(b, `,"reply_to":`...)
		b = strconv.AppendInt(b, m.ReplyTo, 10)
	}
	if len(m.Mentions) > 0 {
		b = append(b, `,"mentions":`...)
		b = appendStrings(b, m.Mentions)
	}
	if m.EditedAt != 0 {
		b = append(b, `,"edited_at":`...)
		b = strconv.AppendInt(b, m.EditedAt, 10)
	}
	if m.Deleted {
		b = append(b, `,"deleted":true`...)
	}
	if len(m.Reactions) > 0 {
		b = append(b, `,"reactions":[`...)
		for i := range m.Reactions {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"emoji":`...)
			b = appendString(b, m.Reactions[i].Emoji)
			b = append(b, `,"users":`...)
			b = appendStrings(b, m.Reactions[i].Users)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(m.Attachments) > 0 {
		// Rare next to plain text: encoding/json is good enough.
		a, _ := json.Marshal(m.Attachments)
		b = append(b, `,"attachments":`...)
		b = append(b, a...)
	}
	return append(b, '}')
}

// messageCap is room for appendMessage's encoding of a plain text message
// (keys, numbers, quotes and its strings), so that the frames around it
// are allocated once: under that, append reallocates it midway, which
// doubled the allocations of every message frame.
func messageCap(m *chat.Message) int {
	return 128 + len(m.Conv) + len(m.From) + len(m.ClientMsgID) + len(m.Kind) + len(m.Body) + len(m.Emoji)
}

// appendStrings appends a list of strings; nil is null, as encoding/json
// has it.
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString quotes s. Printable ASCII other than what encoding/json
// escapes (quote, backslash, <, >, &) is copied; anything else is left to
// encoding/json, so that the output stays byte for byte its own.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// sentReply encodes the `sent` answer to a send.
func sentReply(req reqID, m *chat.Message, dup bool) []byte {
	b := make([]byte, 0, 64+len(req.s)+messageCap(m))
	b = append(b, `{"type":"sent",`...)
	if req.set {
		b = append(b, `"req":`...)
		b = appendString(b, req.s)
		b = append(b, ',')
	}
	b = append(b, `"message":`...)
	b = appendMessage(b, m)
	b = append(b, `,"duplicate":`...)
	b = strconv.AppendBool(b, dup)
	return append(b, '}')
}
