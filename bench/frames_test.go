package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestBodyCarriesSendTime(t *testing.T) {
	at := 1234567 * time.Microsecond
	b := appendBody(nil, at, bodySpec{size: 100})
	if len(b) != 100 {
		t.Errorf("body length %d, want 100", len(b))
	}
	got, ok := bodySentAt(b)
	if !ok || got != at {
		t.Errorf("bodySentAt = %v, %v; want %v, true", got, ok, at)
	}
	if _, ok := bodySentAt([]byte("hello")); ok {
		t.Error("a foreign body parsed as a bench body")
	}
}

func TestSendFrameIsJSON(t *testing.T) {
	b := appendSendFrame(nil, quoteJSON(`c"1\`), "3-", 7, time.Second, bodySpec{size: 10})
	var f struct {
		Type, Req, Conv, Body string
		ClientMsgID           string `json:"client_msg_id"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if f.Type != "send" || f.Req != "3-7" || f.ClientMsgID != "3-7" || f.Conv != `c"1\` || f.Body != "bench:1000000000:" {
		t.Errorf("frame %s decoded as %+v", b, f)
	}
}

func TestBitsetAndContig(t *testing.T) {
	st := &recvState{}
	for _, s := range []int64{1, 2, 4, 200} {
		st.have.add(s)
	}
	st.mine.add(3)
	st.advance()
	if st.contig != 4 {
		t.Errorf("contig = %d, want 4", st.contig)
	}
	if st.have.add(200) {
		t.Error("adding 200 twice reported new")
	}
	if st.have.has(5) || !st.have.has(200) {
		t.Error("has() wrong")
	}
}

func TestSizesForDefaultsAndFlags(t *testing.T) {
	o := Options{Sizes: Sizes{Users: 50}}
	got := o.sizesFor(fanoutScenario)
	if got.Members != 50 || got.Sessions != 50 || got.Groups != 1 {
		t.Errorf("fanout with --users 50: %+v", got)
	}
	got = o.sizesFor(mixedScenario)
	if got.Rate != 2000 || got.Messages != 20000 {
		t.Errorf("mixed defaults: %+v", got)
	}
	o = Options{Sizes: Sizes{Rate: 0}, RateSet: true}
	if got := o.sizesFor(mixedScenario); got.Rate != 0 {
		t.Errorf("mixed with --rate 0: rate %v, want 0 (flat out)", got.Rate)
	}
}

func TestDurationAloneBoundsSend(t *testing.T) {
	o := Options{Sizes: Sizes{Duration: 5 * time.Second, Rate: 1000}, RateSet: true}
	if got := o.sizesFor(sendScenario); got.Messages != 0 || got.Duration != 5*time.Second || got.Rate != 1000 {
		t.Errorf("send with --duration 5s --rate 1000: %+v", got)
	}
}

// TestWordsBody: a words body carries its send time, is rebuilt the same
// from it, differs between send times, holds only what needs no JSON
// escaping, and draws common words often and rare words seldom.
func TestWordsBody(t *testing.T) {
	spec := bodySpec{size: 64, words: true}
	at := 1234567 * time.Microsecond
	b := appendBody(nil, at, spec)
	if got, ok := bodySentAt(b); !ok || got != at {
		t.Fatalf("bodySentAt(%q) = %v, %v", b, got, ok)
	}
	if len(b) < 64 || len(b) > 64+20 {
		t.Errorf("body of %d bytes, want about 64: %q", len(b), b)
	}
	if again := appendBody(nil, at, spec); string(again) != string(b) {
		t.Errorf("rebuilt %q, first %q", again, b)
	}
	if other := appendBody(nil, at+1, spec); string(other) == string(b) {
		t.Errorf("two send times, one body %q", b)
	}
	for _, c := range b {
		if !(c == ' ' || c == ':' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			t.Fatalf("body %q holds %q", b, c)
		}
	}
	counts := map[string]int{}
	for i := range 2000 {
		body := appendBody(nil, time.Duration(i), spec)
		for _, w := range strings.Fields(string(body[strings.LastIndexByte(string(body), ':')+1:])) {
			counts[w]++
		}
	}
	if top := counts[vocab[0]]; top < 500 {
		t.Errorf("the most frequent word is in %d of 2000 bodies' words", top)
	}
	if len(counts) < 1000 {
		t.Errorf("%d distinct words in 2000 bodies, want a long tail", len(counts))
	}
}
