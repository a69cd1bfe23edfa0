package server

import (
	"encoding/json"
	"reflect"
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

// FuzzScanFrame holds the fast frame scanner to encoding/json: whenever it
// takes a frame, the result must be what json.Unmarshal makes of it.
func FuzzScanFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"send","req":"1","conv":"c","client_msg_id":"m","body":"hi","kind":"text"}`,
		`{"type":"sync","req":"r","conv":"c","after_seq":0,"limit":10}`,
		`{"type":"ack","conv":"c","seq":-0}`,
		` { "type" : "read" , "conv":"c", "seq": 12 } `,
		`{"type":"send","body":null,"seq":null,"limit":null}`,
		`{"type":"send","body":"a","body":null}`,
		`{"x":{"a":[1,"}",{"b":"\""}]},"type":"ping","y":[],"z":true,"w":1.5e3}`,
		`{"Type":"ping"}`,
		`{"ſeq":1}`,
		`{"type":"\u0070ing"}`,
		`{"seq":1.0}`,
		`{"limit":99999999999999999999}`,
		`{"body":"\xff"}`,
		`{"type":5}`,
		`null`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanFrame(data)
		if !ok {
			return
		}
		var want clientFrame
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("scanned %q, which encoding/json rejects: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scanned %q as %+v, encoding/json: %+v", data, got, want)
		}
	})
}

// TestScanFrameTakesCommonFrames keeps the fast path in use for the frames
// clients send all the time.
func TestScanFrameTakesCommonFrames(t *testing.T) {
	for _, s := range []string{
		`{"type":"send","req":"1","conv":"c_1","client_msg_id":"m-1","body":"héllo","kind":"text"}`,
		`{"type":"ack","conv":"c_1","seq":42}`,
		`{"type":"read","req":"r","conv":"c_1","seq":42}`,
		`{"type":"sync","req":"s","conv":"c_1","after_seq":0,"limit":100}`,
		`{"type":"ping","req":"p","extension":{"a":[1,2]}}`,
	} {
		if _, ok := scanFrame([]byte(s)); !ok {
			t.Errorf("scanFrame left %s to encoding/json", s)
		}
	}
}

// FuzzAppendMessage holds the hand-written encoders to encoding/json, byte
// for byte.
func FuzzAppendMessage(f *testing.F) {
	f.Add("c_1", int64(7), "u_1", "m-1", "text", "hello", int64(1700000000000), "r1", false)
	f.Add("c", int64(-1), "", "<&>", "system", "héllo \"quoted\" \\ \n\t\u2028 \xff", int64(0), "", true)
	f.Fuzz(func(t *testing.T, conv string, seq int64, from, id, kind, body string, ts int64, req string, dup bool) {
		m := chat.Message{Conv: conv, Seq: seq, From: from, ClientMsgID: id, Kind: kind, Body: body, TS: ts}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendMessage(nil, &m); string(got) != string(want) {
			t.Fatalf("appendMessage = %s, want %s", got, want)
		}
		want, err = json.Marshal(sentFrame{Type: "sent", Req: req, Message: m, Duplicate: dup})
		if err != nil {
			t.Fatal(err)
		}
		if got := sentReply(req, &m, dup); string(got) != string(want) {
			t.Fatalf("sentReply = %s, want %s", got, want)
		}
	})
}
