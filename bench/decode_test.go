package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
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
		var got, want frame
		errGot := decodeFrame([]byte(in), &got)
		errWant := decodeFrameJSON([]byte(in), &want)
		if (errGot != nil) != (errWant != nil) {
			t.Errorf("%s: fast path error %v, encoding/json error %v", in, errGot, errWant)
			continue
		}
		if errWant == nil && !reflect.DeepEqual(plain(&got), plain(&want)) {
			t.Errorf("%s:\n fast %+v\n json %+v", in, plain(&got), plain(&want))
		}
	}
	for _, bad := range []string{`{"type":"msg"`, `not json`, `{"type":"msg"} trailing`} {
		var f frame
		if err := decodeFrame([]byte(bad), &f); err == nil {
			t.Errorf("%q decoded without error", bad)
		}
	}
}

// A frame reused for the next frame keeps nothing of the previous one.
func TestDecodeFrameReuse(t *testing.T) {
	var f frame
	frames := []string{
		`{"type":"batch","conv":"c1","messages":[{"conv":"c1","seq":1,"body":"a"},{"conv":"c1","seq":2,"body":"b"}]}`,
		`{"type":"sent","req":"3-1","message":{"conv":"c1","seq":9,"client_msg_id":"3-1"},"duplicate":true}`,
		`{"type":"messages","req":"sync:0","conv":"c1","messages":[],"max_seq":12,"completed":true}`,
		`{"type":"batch","conv":"c2","messages":[{"seq":3}]}`,
		`{"type":"msg","message":{"conv":"c\"1","seq":7,"body":"a\nb"}}`,
		`{"type":"resync","conv":"c1"}`,
	}
	for _, in := range frames {
		var fresh frame
		if err := decodeFrameJSON([]byte(in), &fresh); err != nil {
			t.Fatal(err)
		}
		if err := decodeFrame([]byte(in), &f); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(plain(&f), plain(&fresh)) {
			t.Errorf("%s after reuse:\n got  %+v\n want %+v", in, plain(&f), plain(&fresh))
		}
	}
}

// plainFrame is a frame with its views copied into strings, to compare.
type plainFrame struct {
	Type, Req, Conv string
	Message         *plainMessage
	Messages        []plainMessage
	Duplicate       bool
	MaxSeq          int64
	Completed       *bool
	Code            string
	RetryAfterMS    int64
	Active          bool
}

type plainMessage struct {
	Conv, From, ClientMsgID, Body string
	Seq                           int64
}

func plain(f *frame) plainFrame {
	pm := func(m *message) plainMessage {
		return plainMessage{string(m.Conv), string(m.From), string(m.ClientMsgID), string(m.Body), m.Seq}
	}
	p := plainFrame{Type: f.Type, Req: string(f.Req), Conv: string(f.Conv), Duplicate: f.Duplicate, MaxSeq: f.MaxSeq,
		Completed: f.Completed, Code: f.Code, RetryAfterMS: f.RetryAfterMS, Active: f.Active}
	if f.Message != nil {
		m := pm(f.Message)
		p.Message = &m
	}
	if f.Messages != nil {
		p.Messages = []plainMessage{}
		for i := range f.Messages {
			p.Messages = append(p.Messages, pm(&f.Messages[i]))
		}
	}
	return p
}

func TestDecodeFastPathTaken(t *testing.T) {
	in := `{"type":"msg","message":{"conv":"c1","seq":7,"from":"u2","client_msg_id":"3-1","kind":"text","body":"bench:123:xx","ts":1700000000000}}`
	var f frame
	sc := scanner{b: []byte(in)}
	if !sc.frame(&f) || f.Message == nil || f.Message.Seq != 7 {
		t.Errorf("fast path did not read %s: %+v", in, f)
	}
}

// A batch frame as the server sends it in the send scenario.
func benchBatchFrame() []byte {
	b := []byte(`{"type":"batch","conv":"01JD3Q8ZK2V7N5M4X9R6T1Y0WB","messages":[`)
	for i := 0; i < 10; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"conv":"01JD3Q8ZK2V7N5M4X9R6T1Y0WB","seq":%d,"from":"01JD3Q7YH4P2B8C6D0E3F5G7HJ","client_msg_id":"17-%d","kind":"text","body":"`, 1000+i, 500+i)
		b = appendBody(b, 12345678901*time.Nanosecond, bodySpec{size: 64})
		b = append(b, `","ts":1732240000000}`...)
	}
	return append(b, `]}`...)
}

func BenchmarkDecodeBatch(b *testing.B) {
	in := benchBatchFrame()
	var f frame
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeFrame(in, &f); err != nil || len(f.Messages) != 10 {
			b.Fatal(err)
		}
	}
}

func TestStringStop(t *testing.T) {
	naive := func(b []byte) bool {
		for _, c := range b {
			if c == '"' || c == '\\' || c < 0x20 {
				return true
			}
		}
		return false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	special := []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, '!', '#', '[', ']', 0x7f, 0x80, 0xff, 'x', '0'}
	b := make([]byte, 8)
	for i := 0; i < 200000; i++ {
		for j := range b {
			if rng.IntN(2) == 0 {
				b[j] = special[rng.IntN(len(special))]
			} else {
				b[j] = byte(rng.IntN(256))
			}
		}
		if got, want := stringStop(binary.LittleEndian.Uint64(b)), naive(b); got != want {
			t.Fatalf("stringStop(%q) = %v, want %v", b, got, want)
		}
	}
}

// Strings of every length with a stop byte at every position: the 8-byte
// steps of rawString must find the same end as a byte-by-byte scan.
func TestRawStringEveryPosition(t *testing.T) {
	for n := 0; n < 40; n++ {
		for pos := -1; pos < n; pos++ {
			for _, stop := range []byte{'\\', '\n'} {
				body := []byte(strings.Repeat("y", n))
				if pos >= 0 {
					body[pos] = stop
				}
				in := append(append([]byte(`"`), body...), `",1`...)
				sc := scanner{b: in}
				got, ok := sc.rawString()
				if wantOK := pos < 0; ok != wantOK || ok && string(got) != string(body) {
					t.Fatalf("rawString(%q) = %q, %v", in, got, ok)
				}
			}
		}
	}
}
