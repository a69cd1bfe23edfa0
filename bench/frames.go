package bench

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// wireMessage is PROTOCOL.md's message object as encoding/json decodes it
// (HTTP pages, the fallback decoder), reduced to what the bench reads.
type wireMessage struct {
	Conv        string `json:"conv"`
	Seq         int64  `json:"seq"`
	From        string `json:"from"`
	ClientMsgID string `json:"client_msg_id"`
	Body        string `json:"body"`
	// v1.1 folded state of a pulled text message.
	EditedAt  int64 `json:"edited_at"`
	Deleted   bool  `json:"deleted"`
	Reactions []struct {
		Emoji string   `json:"emoji"`
		Users []string `json:"users"`
	} `json:"reactions"`
}

// view is m in the form the checks read (it copies: slow paths only).
func (m *wireMessage) view() message {
	return message{Conv: []byte(m.Conv), Seq: m.Seq, From: []byte(m.From), ClientMsgID: []byte(m.ClientMsgID), Body: []byte(m.Body)}
}

// The bench puts the send time in the body so that the latency of every
// delivery can be measured without a shared map: "bench:<ns since the run's
// epoch>:" followed by padding up to --body-size (--body pad), or by words
// (--body words, see bodyWords).
const bodyPrefix = "bench:"

// bodySpec is the shape of the bench's bodies.
type bodySpec struct {
	size  int  // bytes, at least
	words bool // words of a vocabulary rather than 'x' padding
}

// appendBody appends the body of a message sent at sent. It holds only
// letters, digits, spaces and ':', so it needs no escaping inside a JSON
// string; the same sent gives the same body.
func appendBody(b []byte, sent time.Duration, spec bodySpec) []byte {
	start := len(b)
	b = append(b, bodyPrefix...)
	b = strconv.AppendInt(b, int64(sent), 10)
	b = append(b, ':')
	if spec.words {
		return appendWords(b, start, sent, spec.size)
	}
	for len(b)-start < spec.size {
		b = append(b, 'x')
	}
	return b
}

// bodySentAt returns the send time written by appendBody.
func bodySentAt(body []byte) (time.Duration, bool) {
	rest, ok := bytes.CutPrefix(body, []byte(bodyPrefix))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, ':')
	if end < 0 {
		return 0, false
	}
	ns, ok := parseInt(rest[:end])
	return time.Duration(ns), ok
}

// appendCmid appends the client_msg_id of a session's n-th send: its
// prefix ("<session id>-", see session.cmidPrefix) and n.
func appendCmid(b []byte, prefix string, n int) []byte {
	return strconv.AppendInt(append(b, prefix...), int64(n), 10)
}

// appendSendFrame writes the `send` frame of a session's n-th message, sent
// at sent; the same arguments give the same bytes, so a retry rebuilds its
// frame. The client_msg_id (also the req) and the body are plain ASCII made
// by the bench and need no escaping; the conversation id is the server's and
// comes quoted (convJSON).
func appendSendFrame(b []byte, convJSON []byte, cmidPrefix string, n int, sent time.Duration, body bodySpec) []byte {
	b = append(b, `{"type":"send","req":"`...)
	b = appendCmid(b, cmidPrefix, n)
	b = append(b, `","conv":`...)
	b = append(b, convJSON...)
	b = append(b, `,"client_msg_id":"`...)
	b = appendCmid(b, cmidPrefix, n)
	b = append(b, `","body":"`...)
	b = appendBody(b, sent, body)
	return append(b, `"}`...)
}

func quoteJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
