package bench

import (
	"reflect"
	"testing"
)

// The fast scanner must read every frame exactly as encoding/json does, or
// leave it to encoding/json.
func TestDecodeFrameMatchesJSON(t *testing.T) {
	frames := []string{
		`{"type":"hello","user":{"id":"u1","username":"a"},"session":"s1","sequences":{"conversations":3}}`,
		`{"type":"msg","message":{"conv":"c1","seq":7,"from":"u2","client_msg_id":"3-1","kind":"text","body":"bench:123:xx","ts":1700000000000}}`,
		` { "message" : { "ts" : 1 , "seq" : 8 , "conv" : "c1" , "body" : "hi" } , "type" : "msg" } `,
		`{"type":"batch","conv":"c1","messages":[{"conv":"c1","seq":1,"body":"a"},{"conv":"c1","seq":2,"body":"b","extra":[1,{"x":null}]}]}`,
		`{"type":"sent","req":"3-1","message":{"conv":"c1","seq":9,"client_msg_id":"3-1"},"duplicate":false}`,
		`{"type":"messages","req":"sync:0","conv":"c1","messages":[],"max_seq":12,"completed":true}`,
		`{"type":"error","req":"3-2","code":"rate_limited","message":"slow down","retry_after_ms":250}`,
		`{"type":"storm","conv":"c1","active":true,"count":1200,"window_ms":1000}`,
		`{"type":"resync","conv":"c1"}`,
		`{"type":"receipt","conv":"c1","user":"u3","seq":4}`,
		`{"type":"msg","message":{"conv":"c\"1","seq":7,"body":"a\nb"}}`,      // escapes: fallback
		`{"type":"messages","max_seq":1.5e3,"completed":false,"messages":[]}`, // float: fallback
		`{"type":"error","req":null,"code":"bad_request","message":"x"}`,
	}
	for _, in := range frames {
		got, errGot := decodeFrame([]byte(in))
		want, errWant := decodeFrameJSON([]byte(in))
		if (errGot != nil) != (errWant != nil) {
			t.Errorf("%s: fast path error %v, encoding/json error %v", in, errGot, errWant)
			continue
		}
		if errWant == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n fast %+v\n json %+v", in, got, want)
		}
	}
	for _, bad := range []string{`{"type":"msg"`, `not json`, `{"type":"msg"} trailing`} {
		if _, err := decodeFrame([]byte(bad)); err == nil {
			t.Errorf("%q decoded without error", bad)
		}
	}
}

func TestDecodeFastPathTaken(t *testing.T) {
	in := `{"type":"msg","message":{"conv":"c1","seq":7,"from":"u2","client_msg_id":"3-1","kind":"text","body":"bench:123:xx","ts":1700000000000}}`
	var f frame
	sc := scanner{b: []byte(in)}
	if !sc.frame(&f) || f.Message == nil || f.Message.Seq != 7 {
		t.Errorf("fast path did not read %s: %+v", in, f)
	}
}
