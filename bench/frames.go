package bench

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// wireMessage is PROTOCOL.md's message object, reduced to what the bench reads.
type wireMessage struct {
	Conv        string `json:"conv"`
	Seq         int64  `json:"seq"`
	From        string `json:"from"`
	ClientMsgID string `json:"client_msg_id"`
	Body        string `json:"body"`
}

// The bench puts the send time in the body so that the latency of every
// delivery can be measured without a shared map: "bench:<ns since the run's
// epoch>:" followed by padding up to --body-size.
const bodyPrefix = "bench:"

func makeBody(sent time.Duration, size int) string {
	var b strings.Builder
	b.Grow(max(size, 32))
	b.WriteString(bodyPrefix)
	b.WriteString(strconv.FormatInt(int64(sent), 10))
	b.WriteByte(':')
	for b.Len() < size {
		b.WriteByte('x')
	}
	return b.String()
}

// bodySentAt returns the send time written by makeBody.
func bodySentAt(body string) (time.Duration, bool) {
	if !strings.HasPrefix(body, bodyPrefix) {
		return 0, false
	}
	rest := body[len(bodyPrefix):]
	end := strings.IndexByte(rest, ':')
	if end < 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(rest[:end], 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ns), true
}

// appendSendFrame writes a `send` frame. Ids and bodies made by the bench are
// plain ASCII, but the conversation id is the server's and is quoted properly.
func appendSendFrame(b []byte, convJSON []byte, cmid, body string) []byte {
	b = append(b, `{"type":"send","req":`...)
	b = strconv.AppendQuote(b, cmid)
	b = append(b, `,"conv":`...)
	b = append(b, convJSON...)
	b = append(b, `,"client_msg_id":`...)
	b = strconv.AppendQuote(b, cmid)
	b = append(b, `,"body":`...)
	b = strconv.AppendQuote(b, body)
	return append(b, '}')
}

func quoteJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
