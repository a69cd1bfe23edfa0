package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/cork"
)

// wireWriter hands the WebSocket library a cork.Conn instead of the bare
// connection when it hijacks the HTTP connection. It also trades the HTTP
// server's 4 KiB buffers for smaller ones: writes are gathered by the
// cork.Conn and client frames are small, while every idle session would keep the
// larger buffers for its whole life.
type wireWriter struct {
	http.ResponseWriter
	wire *cork.Conn
	// refused and refusal are an error answer the WebSocket library gave
	// instead of upgrading (a foreign Origin, a request that is no
	// handshake): its status and text, kept from the client so that the
	// handler answers with the protocol's JSON error instead.
	refused int
	refusal bytes.Buffer
	// beforeUpgrade, when set, runs when the library is about to upgrade
	// (its 101 is held back until then); an error stops the upgrade and
	// is kept in vetoed for the handler to answer.
	beforeUpgrade func() error
	upgrading     bool
	vetoed        error
}

func (ww *wireWriter) WriteHeader(code int) {
	if code >= 400 {
		ww.refused = code
		return
	}
	if code == http.StatusSwitchingProtocols && ww.beforeUpgrade != nil {
		ww.upgrading = true // written by Hijack, if beforeUpgrade allows
		return
	}
	ww.ResponseWriter.WriteHeader(code)
}

func (ww *wireWriter) Write(p []byte) (int, error) {
	if ww.refused != 0 {
		return ww.refusal.Write(p)
	}
	return ww.ResponseWriter.Write(p)
}

// refusedError is the refusal as the protocol's error: forbidden for an
// Origin not allowed, bad_request for a request that is no WebSocket
// handshake.
func (ww *wireWriter) refusedError() error {
	code := chat.EBadRequest
	switch {
	case ww.refused == http.StatusForbidden:
		code = chat.EForbidden
	case ww.refused >= 500:
		code = chat.EInternal
	}
	return chat.Errorf(code, "%s", strings.TrimSpace(ww.refusal.String()))
}

// Buffer sizes of a hijacked connection, kept by every session for its
// whole life. The read buffer holds a frame header or a small frame, the
// cork.Conn reads ahead in larger chunks when frames pour in; the write buffer
// holds frame headers and control frames (a larger one takes two writes to
// the wire, which keeps them in order), larger writes go straight through.
const (
	wireReadBuffer  = 128
	wireWriteBuffer = 128
)

func (ww *wireWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if ww.beforeUpgrade != nil {
		err := errors.New("the WebSocket library hijacked without its 101")
		if ww.upgrading {
			err = ww.beforeUpgrade()
		}
		if err != nil {
			ww.vetoed = err
			return nil, nil, err
		}
		ww.ResponseWriter.WriteHeader(http.StatusSwitchingProtocols)
	}
	conn, brw, err := http.NewResponseController(ww.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	ww.wire = cork.New(conn)
	return ww.wire, bufio.NewReadWriter(smallReader(brw.Reader, ww.wire), bufio.NewWriterSize(ww.wire, wireWriteBuffer)), nil
}

// smallReader returns a reader of wireReadBuffer bytes that goes on where
// old, the HTTP server's, stopped. Bytes a client sent right behind its
// handshake may be in old's buffer already: they are moved into the new
// buffer, where the WebSocket library looks for them (Buffered, Peek).
func smallReader(old *bufio.Reader, w *cork.Conn) *bufio.Reader {
	n := old.Buffered()
	if n == 0 {
		return bufio.NewReaderSize(w, wireReadBuffer)
	}
	if n > wireReadBuffer {
		return old
	}
	pending, _ := old.Peek(n)
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(pending)), w), wireReadBuffer)
	if _, err := r.Peek(n); err != nil {
		return old
	}
	return r
}
