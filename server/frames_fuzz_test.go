package server

import (
	"testing"

	"github.com/imserver/imserver/chat"
)

// FuzzDecodeFrame feeds the frame decoder arbitrary bytes: it must never
// panic, must answer every bad frame with bad_request, and must accept only
// frames whose required fields are there. Seeds live in
// testdata/fuzz/FuzzDecodeFrame.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"send","req":"1","conv":"c","client_msg_id":"m","body":"hi"}`,
		`{"type":"ack","conv":"c","seq":3}`,
		`{"type":"read","conv":"c","seq":0}`,
		`{"type":"sync","req":"r","conv":"c","after_seq":0,"limit":10}`,
		`{"type":"ping","req":"p"}`,
		`{"type":"send","req":7}`,
		`{"type":"nope"}`,
		`{}`,
		`[]`,
		`{"type":"ack","conv":"c","seq":-1}`,
		`{"type":"sync","conv":"c","after_seq":"x"}`,
		`{"type":"send","conv":"c","client_msg_id":"m","body":null}`,
		`{"type":"ping"}{"type":"ping"}`,
		"\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeFrame(data)
		if err != nil {
			if got := chat.ErrorCode(err); got != chat.EBadRequest {
				t.Fatalf("error code = %q, want %q (err %v)", got, chat.EBadRequest, err)
			}
			return
		}
		switch fr.Type {
		case frameSend:
			if fr.Conv == "" || fr.ClientMsgID == "" || fr.Body == nil {
				t.Fatalf("accepted send without required fields: %q", data)
			}
		case frameAck, frameRead:
			if fr.Conv == "" || fr.Seq == nil || *fr.Seq < 0 {
				t.Fatalf("accepted %s without a valid seq: %q", fr.Type, data)
			}
		case frameSync:
			if fr.Conv == "" || fr.AfterSeq == nil || *fr.AfterSeq < 0 || (fr.Limit != nil && *fr.Limit < 1) {
				t.Fatalf("accepted sync with bad fields: %q", data)
			}
		case framePing:
		default:
			t.Fatalf("accepted unknown type %q", fr.Type)
		}
	})
}
