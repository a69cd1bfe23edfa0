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
	if len(m.Attachments) > 0 {
		// Rare next to plain text: encoding/json is good enough.
		a, _ := json.Marshal(m.Attachments)
		b = append(b, `,"attachments":`...)
		b = append(b, a...)
	}
	return append(b, '}')
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
func sentReply(req string, m *chat.Message, dup bool) []byte {
	b := make([]byte, 0, 96+len(m.Body)+len(m.ClientMsgID)+len(req))
	b = append(b, `{"type":"sent",`...)
	if req != "" {
		b = append(b, `"req":`...)
		b = appendString(b, req)
		b = append(b, ',')
	}
	b = append(b, `"message":`...)
	b = appendMessage(b, m)
	b = append(b, `,"duplicate":`...)
	b = strconv.AppendBool(b, dup)
	return append(b, '}')
}
