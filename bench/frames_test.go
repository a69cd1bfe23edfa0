package bench

import (
	"encoding/json"
	"testing"
	"time"
)

func TestBodyCarriesSendTime(t *testing.T) {
	at := 1234567 * time.Microsecond
	b := appendBody(nil, at, 100)
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
	b := appendSendFrame(nil, quoteJSON(`c"1\`), "3-", 7, time.Second, 10)
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
