package server

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
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
		`{"type":"send","conv":"c","client_msg_id":"m","kind":"reaction","target":3,"emoji":"👍","on":true}`,
		`{"type":"send","conv":"c","client_msg_id":"m","kind":"delete","target":3}`,
		`{"type":"send","conv":"c","client_msg_id":"m","kind":"edit","target":3}`,
		`{"type":"typing","conv":"c"}`,
		`{"type":"typing"}`,
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
			if fr.Conv == "" || fr.ClientMsgID == "" || (fr.Body == nil && !bodyOptional(fr.Kind)) {
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
		case frameTyping:
			if fr.Conv == "" {
				t.Fatalf("accepted typing without conv: %q", data)
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
		`{"type":"send","req":"1","conv":"c","client_msg_id":"m","kind":"reaction","target":7,"emoji":"👍","on":false}`,
		`{"type":"send","conv":"c","client_msg_id":"m","body":"re","reply_to":2,"on":null,"target":null}`,
		`{"on":1}`,
		`{"on":"true"}`,
		`{"typing":true,"type":"typing","conv":"c"}`,
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
		`{"type":"send","req":"2","conv":"c_1","client_msg_id":"m-2","kind":"reaction","target":1,"emoji":"🎉","on":true}`,
		`{"type":"send","req":"3","conv":"c_1","client_msg_id":"m-3","body":"ok","reply_to":1}`,
		`{"type":"typing","conv":"c_1"}`,
	} {
		if _, ok := scanFrame([]byte(s)); !ok {
			t.Errorf("scanFrame left %s to encoding/json", s)
		}
	}
}

// FuzzAppendMessage holds the hand-written encoders to encoding/json, byte
// for byte.
func FuzzAppendMessage(f *testing.F) {
	f.Add("c_1", int64(7), "u_1", "m-1", "text", "hello", int64(1700000000000), "r1", true, false, int64(0), "", byte(0), int64(0), "", int64(0), "", "")
	f.Add("c", int64(-1), "", "<&>", "system", "héllo \"quoted\" \\ \n\t\u2028 \xff", int64(0), "", true, true, int64(3), "👍", byte(1), int64(2), "u1 u<2>", int64(5), "🎉:u1,u2;\xff:", "x")
	f.Add("c", int64(9), "u", "m", "reaction", "", int64(1), "", false, false, int64(3), ":+1:", byte(2), int64(0), "", int64(0), ":+1:", "")
	f.Fuzz(func(t *testing.T, conv string, seq int64, from, id, kind, body string, ts int64, req string, reqSet, dup bool,
		target int64, emoji string, on byte, replyTo int64, mentions string, editedAt int64, reactions string, deleted string) {
		m := chat.Message{Conv: conv, Seq: seq, From: from, ClientMsgID: id, Kind: kind, Body: body, TS: ts,
			Target: target, Emoji: emoji, ReplyTo: replyTo, EditedAt: editedAt, Deleted: deleted != ""}
		if on > 0 {
			b := on > 1
			m.On = &b
		}
		if mentions != "" {
			m.Mentions = strings.Split(mentions, " ")
		}
		// "emoji:user,user;emoji:" (no users: a nil list)
		if reactions != "" {
			for _, r := range strings.Split(reactions, ";") {
				e, users, _ := strings.Cut(r, ":")
				var us []string
				if users != "" {
					us = strings.Split(users, ",")
				}
				m.Reactions = append(m.Reactions, chat.Reaction{Emoji: e, Users: us})
			}
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendMessage(nil, &m); string(got) != string(want) {
			t.Fatalf("appendMessage = %s, want %s", got, want)
		}
		r := reqID{s: req, set: reqSet || req != ""}
		want, err = json.Marshal(sentFrame{Type: "sent", Req: r, Message: m, Duplicate: dup})
		if err != nil {
			t.Fatal(err)
		}
		if got := sentReply(r, &m, dup); string(got) != string(want) {
			t.Fatalf("sentReply = %s, want %s", got, want)
		}
	})
}

// limitNumber takes JSON integers (with a non-negative exponent, as
// JavaScript writes large ones), saturating beyond int64, and nothing else.
func TestLimitNumber(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"5", 5, true}, {"0", 0, true}, {"-0", 0, true}, {"-7", -7, true}, {"1000", 1000, true},
		{"99999999999999999999", math.MaxInt64, true}, {"-99999999999999999999", math.MinInt64, true},
		{"1e30", math.MaxInt64, true}, {"1E+30", math.MaxInt64, true}, {"5e2", 500, true}, {"-1e30", math.MinInt64, true},
		{"0e999999999999", 0, true}, {"1e999999999999", math.MaxInt64, true}, {"9e18", 9e18, true}, {"1e19", math.MaxInt64, true}, {"9e17", 9e17, true},
		{"", 0, false}, {"-", 0, false}, {"+5", 0, false}, {"05", 0, false}, {"1.0", 0, false}, {"1.5", 0, false},
		{"1e-3", 0, false}, {"0x10", 0, false}, {"0x1p4", 0, false}, {"1_000", 0, false}, {"Inf", 0, false},
		{"NaN", 0, false}, {" 5", 0, false}, {"5 ", 0, false}, {"1e", 0, false}, {"e5", 0, false}, {`"5"`, 0, false},
	} {
		got, ok := limitNumber(c.in)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("limitNumber(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
