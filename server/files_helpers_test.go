package server_test

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// fileJSON is a file object; fileMessageJSON a message with attachments
// (messageJSON stays comparable with ==).
type (
	fileJSON struct {
		ID       string `json:"id"`
		Name     string `json:"name"`
		Size     int64  `json:"size"`
		Mime     string `json:"mime"`
		Width    int    `json:"width"`
		Height   int    `json:"height"`
		URL      string `json:"url"`
		ThumbURL string `json:"thumb_url"`
	}
	fileMessageJSON struct {
		messageJSON
		Attachments []fileJSON `json:"attachments"`
	}
)

// upload POSTs body as a file named name with Content-Type ctype.
func (a *account) upload(t testing.TB, name, ctype string, body []byte) response {
	t.Helper()
	r, err := a.uploadErr(name, ctype, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (a *account) uploadErr(name, ctype string, body io.Reader, size int64) (response, error) {
	h := http.Header{}
	if ctype != "" {
		h.Set("Content-Type", ctype)
	}
	req, err := http.NewRequest("POST", a.ts.URL+"/api/v1/files?name="+url.QueryEscape(name), body)
	if err != nil {
		return response{}, err
	}
	req.ContentLength = size
	req.Header = h
	req.Header.Set("Authorization", "Bearer "+a.Token)
	return a.ts.send(req)
}

// uploadFile uploads and returns the file object (201 expected).
func (a *account) uploadFile(t testing.TB, name, ctype string, body []byte) fileJSON {
	t.Helper()
	r := a.upload(t, name, ctype, body).want(t, http.StatusCreated)
	var out struct {
		File fileJSON `json:"file"`
	}
	r.decode(t, &out)
	if out.File.ID == "" {
		t.Fatalf("upload %s: no file id in %s", name, r)
	}
	return out.File
}

// send performs req and reads the whole answer.
func (ts *testServer) send(req *http.Request) (response, error) {
	res, err := ts.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	r := response{Status: res.StatusCode, Header: res.Header, Body: b}
	if res.Header.Get("Content-Type") == "application/json" {
		_ = json.Unmarshal(b, &r.JSON)
	}
	return r, nil
}

// fetch GETs path (a file or a signed link) with token ("" for none) and
// extra headers.
func (ts *testServer) fetch(t testing.TB, path, token string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest("GET", ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := ts.send(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sendFiles sends a text message with attachments over HTTP.
func (a *account) sendFiles(t testing.TB, conv, clientMsgID, body string, ids ...string) response {
	t.Helper()
	return a.post(t, convPath(conv, "messages"), map[string]any{"client_msg_id": clientMsgID, "body": body, "attachments": ids})
}

// pngImage encodes a w×h PNG with a gradient.
func pngImage(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.NRGBA{uint8(x), uint8(y), uint8(x + y), 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngBomb is a valid w×h 1-bit grayscale PNG of zeros: tens of KB that
// would decode to w*h*8 bytes or more.
func pngBomb(t testing.TB, w, h int) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&out, binary.BigEndian, uint32(len(data)))
		c := crc32.NewIEEE()
		c.Write([]byte(typ))
		c.Write(data)
		out.WriteString(typ)
		out.Write(data)
		binary.Write(&out, binary.BigEndian, c.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 1, 0 // 1 bit, grayscale
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	row := make([]byte, 1+(w+7)/8)
	for y := 0; y < h; y++ {
		zw.Write(row)
	}
	zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return out.Bytes()
}
