package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/internal/cork"
)

// syncLimit is the page size of `sync` frames and GET pulls: the protocol's max.
const syncLimit = 1000

// session is one WebSocket client of the bench: it keeps its state across
// reconnects, checks every delivery against what it already has, and fills
// gaps with `sync` the way PROTOCOL.md asks a client to.
type session struct {
	id   int
	user *benchUser
	run  *run

	mu        sync.Mutex
	conn      *wsConn
	convs     map[string]*recvState
	convList  []*recvState
	pending   map[int]pendingSend // by n of the client_msg_id (also the req)
	nextCmid  int
	lastDeliv time.Duration // since run epoch, of the last live delivery

	// cmidPrefix starts every client_msg_id of this session: "<id>-", then
	// the send's number n.
	cmidPrefix string

	window chan struct{} // in-flight sends

	// The sending goroutine's frame buffer, reused from batch to batch.
	sendBuf  []byte
	sendEnds []int
}

type pendingSend struct {
	st     *recvState
	sentAt time.Duration // also in the body, so the frame can be rebuilt for a retry
	tries  int
	mu     mutation // the team mix: what the send changes
}

func newSession(id int, u *benchUser, r *run) *session {
	return &session{id: id, user: u, run: r, convs: map[string]*recvState{}, pending: map[int]pendingSend{},
		cmidPrefix: strconv.Itoa(id) + "-", window: make(chan struct{}, max(1, r.opts.Inflight))}
}

func (s *session) addConv(conv string) {
	if s.convs[conv] != nil {
		return
	}
	st := &recvState{conv: conv, convBytes: []byte(conv), convJSON: quoteJSON(conv)}
	s.convs[conv] = st
	s.convList = append(s.convList, st)
}

func (s *session) online() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

// connect opens the WebSocket, waits for `hello` and starts reading. With pull
// set (a reconnect), every conversation is pulled from where the session left
// it, overlapping with live delivery; duplicates of that overlap are dropped.
func (s *session) connect(ctx context.Context, pull bool) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var cc *cork.Conn
	c, resp, err := websocket.Dial(traceConn(dctx, &cc), s.run.node(s.id).wsURL(s.user.token), &websocket.DialOptions{HTTPClient: s.run.wsHTTP})
	if err != nil {
		if resp != nil {
			return fmt.Errorf("GET /api/v1/ws (user %s): status %d: %w", s.user.name, resp.StatusCode, err)
		}
		return fmt.Errorf("GET /api/v1/ws (user %s): %w", s.user.name, err)
	}
	c.SetReadLimit(64 << 20) // batch and messages frames can be large
	_, b, err := c.Read(dctx)
	if err != nil {
		c.CloseNow()
		return fmt.Errorf("ws user %s: waiting for hello: %w", s.user.name, err)
	}
	var f frame
	if err := decodeFrame(b, &f); err != nil || f.Type != "hello" {
		c.CloseNow()
		return fmt.Errorf("ws user %s: first frame is not hello, PROTOCOL.md says the server sends hello on connect: got %s", s.user.name, truncate(b, 200))
	}
	wc := newWSConn(ctx, c, cc)
	s.mu.Lock()
	s.conn = wc
	for _, st := range s.convList {
		// Pulls and the live order belong to a connection.
		st.liveLast, st.syncing, st.again = 0, false, false
	}
	s.mu.Unlock()
	go s.read(ctx, wc)
	if pull {
		s.mu.Lock()
		for _, st := range s.convList {
			s.startSyncLocked(st)
		}
		s.mu.Unlock()
	}
	return nil
}

// disconnect closes the current connection on purpose.
func (s *session) disconnect() {
	s.mu.Lock()
	wc := s.conn
	s.conn = nil
	s.mu.Unlock()
	if wc != nil {
		wc.closed.Store(true)
		wc.c.Close(websocket.StatusNormalClosure, "bench done")
	}
}

var errOffline = errors.New("session offline")

// write sends one frame on the current connection.
func (s *session) write(b []byte) error {
	s.mu.Lock()
	wc := s.conn
	s.mu.Unlock()
	if wc == nil {
		return errOffline
	}
	return wc.write(b)
}

// readBufKeep is the largest read buffer a session keeps between frames;
// a bigger one (a long sync page) is dropped after use.
const readBufKeep = 1 << 20

func (s *session) read(ctx context.Context, wc *wsConn) {
	defer wc.stopWatch()
	// One buffer and one frame per connection, reused for every frame: the
	// handlers copy what they keep (see frame).
	buf := make([]byte, 0, 4<<10)
	var f frame
	for {
		b, err := wc.readMessage(buf[:0])
		if err != nil {
			if wc.closed.Load() || ctx.Err() != nil {
				return
			}
			wc.c.CloseNow()
			s.run.note("disconnect", fmt.Sprintf("session %d lost its connection: %v", s.id, err))
			s.run.stats.disconnects.Add(1)
			s.mu.Lock()
			if s.conn == wc {
				s.conn = nil
			}
			s.mu.Unlock()
			go s.reconnect(ctx)
			return
		}
		s.handle(&f, b)
		if cap(b) <= readBufKeep {
			buf = b
		}
	}
}

// reconnect is what a client does after losing its socket: connect again
// and pull what it missed.
func (s *session) reconnect(ctx context.Context) {
	for try := 0; try < 10 && ctx.Err() == nil; try++ {
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
		if s.run.stopping.Load() {
			return
		}
		if err := s.connect(ctx, true); err == nil {
			s.run.stats.reconnects.Add(1)
			return
		}
	}
}

// handle decodes and checks one server frame; f is the reader's frame,
// reused from frame to frame.
func (s *session) handle(f *frame, b []byte) {
	if err := decodeFrame(b, f); err != nil {
		s.run.deviation(fmt.Sprintf("server frame is not JSON: %s", truncate(b, 200)))
		return
	}
	now := s.run.now()
	switch f.Type {
	case "msg":
		m := f.Message
		if m == nil || len(m.Conv) == 0 || m.Seq <= 0 {
			s.run.deviation(fmt.Sprintf("msg frame without a valid message object: %s", truncate(b, 200)))
			return
		}
		s.mu.Lock()
		s.deliverLocked(m, true, now)
		s.mu.Unlock()
	case "batch":
		s.run.stats.batchFrames.Add(1)
		s.mu.Lock()
		for i := range f.Messages {
			m := &f.Messages[i]
			if len(m.Conv) == 0 {
				m.Conv = f.Conv
			}
			s.deliverLocked(m, true, now)
		}
		s.mu.Unlock()
	case "sent":
		m := f.Message
		if m == nil || len(m.Conv) == 0 || m.Seq <= 0 {
			s.run.deviation(fmt.Sprintf("sent frame without a valid message object: %s", truncate(b, 200)))
			return
		}
		s.confirm(f.Req, m, f.Duplicate, now)
	case "messages":
		s.syncPage(f, now, b)
	case "resync":
		s.run.stats.resyncs.Add(1)
		s.mu.Lock()
		if st := s.convs[string(f.Conv)]; st != nil {
			st.resynced = true
			s.startSyncLocked(st)
		}
		s.mu.Unlock()
	case "error":
		s.frameError(f, b)
	case "storm":
		if f.Active {
			s.run.stats.storms.Add(1)
		}
	case "typing":
		s.run.stats.typing.Add(1)
	case "hello", "pong", "read", "receipt", "conversation", "presence":
	default:
		s.run.stats.unknownFrames.Add(1)
	}
}

// deliverLocked accounts one received message. On the live path the seqs of
// a conversation must rise within one connection: a seq at or below the last
// one already held is a duplicate, below it and new is an order violation
// (with several nodes, a reordering noted apart).
// Pulls may overlap what live delivery brought; that overlap is not counted.
func (s *session) deliverLocked(m *message, live bool, now time.Duration) {
	st := s.convs[string(m.Conv)]
	if st == nil {
		s.run.stats.foreign.Add(1)
		return
	}
	if !live && s.ownMessage(m) {
		// Pulls return the session's own messages too; they are not deliveries.
		st.mine.add(m.Seq)
		st.advance()
		return
	}
	if live {
		s.run.stats.liveDeliveries.Add(1)
		s.lastDeliv = now
		if m.Seq <= st.liveLast {
			if st.have.has(m.Seq) {
				s.run.stats.duplicated.Add(1)
				return
			}
			if len(s.run.nodes) > 1 {
				// Each node publishes what it commits on its own; across
				// nodes, live order is not promised (the client orders by
				// seq and pulls the holes), only that nothing is lost or
				// repeated, which the ledger still checks.
				s.run.stats.reordered.Add(1)
			} else {
				s.run.stats.orderViolations.Add(1)
			}
		} else {
			st.liveLast = m.Seq
		}
	}
	if !st.have.add(m.Seq) {
		return
	}
	s.run.stats.received.Add(1)
	if !live {
		s.run.stats.viaPull.Add(1)
	} else if at, ok := bodySentAt(m.Body); ok {
		s.run.latency.record(now - at)
	}
	st.advance()
	if live && st.resynced && !st.syncing && m.Seq > st.contig+1 {
		// Live delivery resumed after a cut and skipped seqs the pull did
		// not bring: fill the gap, as the protocol asks of a client.
		s.startSyncLocked(st)
	}
}

// ownMessage reports whether this session sent m: the bench's
// client_msg_ids start with the sending session's id and a dash.
func (s *session) ownMessage(m *message) bool {
	return string(m.From) == s.user.id && bytes.HasPrefix(m.ClientMsgID, []byte(s.cmidPrefix))
}

// acquire takes a slot of the in-flight window, waiting while it is full.
func (s *session) acquire(ctx context.Context) error {
	select {
	case s.window <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(s.run.opts.DrainTimeout)
	defer t.Stop()
	select {
	case s.window <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		s.run.note("stall", fmt.Sprintf("session %d: no send answered for %s with %d in flight; it stopped sending", s.id, s.run.opts.DrainTimeout, cap(s.window)))
		return errors.New("sends not answered")
	}
}

// tryAcquire takes a slot of the in-flight window if one is free now.
func (s *session) tryAcquire() bool {
	select {
	case s.window <- struct{}{}:
		return true
	default:
		return false
	}
}

// sendBatch sends one `send` frame into each of sts, for which the caller
// holds window slots. The frames leave in one write when the connection
// allows (see cork.Conn): a sender whose window freed k slots at once puts
// its k sends in one syscall instead of k. Only the sending goroutine of
// the session calls it (it owns sendBuf).
func (s *session) sendBatch(sts []*recvState, body bodySpec) error {
	now := s.run.now()
	buf, ends := s.sendBuf[:0], s.sendEnds[:0]
	s.mu.Lock()
	first := s.nextCmid + 1
	for _, st := range sts {
		s.nextCmid++
		p := pendingSend{st: st, sentAt: now, mu: s.pickMutation(st)}
		if p.mu.kind == sendText {
			buf = appendSendFrame(buf, st.convJSON, s.cmidPrefix, s.nextCmid, now, body)
		} else {
			buf = appendMutationFrame(buf, st.convJSON, s.cmidPrefix, s.nextCmid, now, body, p.mu)
		}
		ends = append(ends, len(buf))
		s.pending[s.nextCmid] = p
	}
	wc := s.conn
	s.mu.Unlock()
	s.sendBuf, s.sendEnds = buf, ends
	s.run.stats.attempted.Add(int64(len(sts)))
	err := errOffline
	if wc != nil {
		err = wc.writeFrames(buf, ends)
	}
	if err == nil {
		return nil
	}
	// Every frame of the batch is in doubt; those still pending are given
	// up (a frame answered meanwhile was delivered after all).
	failed := 0
	s.mu.Lock()
	for n := first; n < first+len(sts); n++ {
		if _, ok := s.pending[n]; ok {
			delete(s.pending, n)
			failed++
		}
	}
	s.mu.Unlock()
	for range failed {
		<-s.window
		s.run.sendError("write: " + err.Error())
	}
	return err
}

// parseReq returns n of a req (a client_msg_id) made by this session.
func (s *session) parseReq(req []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(req, []byte(s.cmidPrefix))
	if !ok {
		return 0, false
	}
	n, ok := parseInt(rest)
	return int(n), ok && n > 0
}

func (s *session) confirm(req []byte, m *message, dup bool, now time.Duration) {
	n, ok := s.parseReq(req)
	s.mu.Lock()
	p, found := s.pending[n]
	if ok && found {
		delete(s.pending, n)
	}
	s.mu.Unlock()
	if !ok || !found {
		s.run.deviation(fmt.Sprintf("sent frame with req %q that matches no pending send", req))
		return
	}
	<-s.window
	if string(m.Conv) != p.st.conv || !bytes.Equal(m.ClientMsgID, req) {
		s.run.deviation(fmt.Sprintf("sent frame for req %q carries conv %q client_msg_id %q, sent conv %q", req, m.Conv, m.ClientMsgID, p.st.conv))
	}
	if dup && p.tries == 0 {
		s.run.deviation(fmt.Sprintf("first send of client_msg_id %q answered duplicate:true", req))
	}
	first, clash := s.run.ledger.confirm(p.st.conv, m.Seq, s.id)
	if clash {
		s.run.stats.seqClashes.Add(1)
	}
	s.run.ackLatency.record(now - p.sentAt)
	s.run.stats.confirmed.Add(1)
	s.run.markSent(now)
	if first {
		s.mu.Lock()
		if p.st.mine.add(m.Seq) {
			p.st.own++
		}
		p.st.advance()
		if s.run.mix {
			p.st.confirmedMix(p, m.Seq)
		}
		s.mu.Unlock()
	}
}

// inflight is the number of sends not yet answered.
func (s *session) inflight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

func (s *session) frameError(f *frame, b []byte) {
	s.run.stats.errorFrames.Add(1)
	if bytes.HasPrefix(f.Req, []byte("sync:")) {
		s.run.deviation(fmt.Sprintf("sync answered with an error: %s", truncate(b, 200)))
		s.mu.Lock()
		if st := s.syncTarget(f.Req); st != nil {
			st.syncing = false
		}
		s.mu.Unlock()
		return
	}
	n, ok := s.parseReq(f.Req)
	s.mu.Lock()
	p, found := s.pending[n]
	found = found && ok
	retry := found && (f.Code == "rate_limited" || f.Code == "unavailable") && p.tries < 5
	if found && !retry {
		delete(s.pending, n)
	}
	if retry {
		p.tries++
		s.pending[n] = p
	}
	s.mu.Unlock()
	if !found {
		s.run.sendError("error frame: " + f.Code)
		return
	}
	if !retry {
		<-s.window
		s.run.sendError(f.Code)
		return
	}
	// Same client_msg_id: the server stores it once however often it is retried.
	s.run.stats.retries.Add(1)
	wait := time.Duration(f.RetryAfterMS) * time.Millisecond
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	frame := s.appendFrame(nil, p, n)
	go func() {
		time.Sleep(wait)
		if err := s.write(frame); err != nil {
			s.mu.Lock()
			_, still := s.pending[n]
			delete(s.pending, n)
			s.mu.Unlock()
			if still {
				<-s.window
				s.run.sendError("write: " + err.Error())
			}
		}
	}()
}

// startSyncLocked pulls a conversation with `sync` frames from the end of
// what it holds without a gap, unless a pull is already running (it then
// runs once more).
func (s *session) startSyncLocked(st *recvState) {
	s.startSyncFromLocked(st, st.contig)
}

func (s *session) startSyncFromLocked(st *recvState, after int64) {
	if st.syncing {
		st.again = true
		return
	}
	st.syncing = true
	s.run.stats.syncChains.Add(1)
	s.sendSyncLocked(st, after)
}

func (s *session) sendSyncLocked(st *recvState, after int64) {
	idx := -1
	for i, x := range s.convList {
		if x == st {
			idx = i
			break
		}
	}
	frame := fmt.Appendf(nil, `{"type":"sync","req":"sync:%d","conv":%s,"after_seq":%d,"limit":%d}`, idx, st.convJSON, after, syncLimit)
	// Not from the reader goroutine: a blocked write must not stop reading.
	go func() {
		if err := s.write(frame); err != nil {
			s.mu.Lock()
			st.syncing = false
			s.mu.Unlock()
		}
	}()
}

func (s *session) syncTarget(req []byte) *recvState {
	i, ok := parseInt(bytes.TrimPrefix(req, []byte("sync:")))
	if !ok || i < 0 || i >= int64(len(s.convList)) {
		return nil
	}
	return s.convList[i]
}

func (s *session) syncPage(f *frame, now time.Duration, raw []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncTarget(f.Req)
	if st == nil {
		s.run.deviation(fmt.Sprintf("messages frame with unknown req: %s", truncate(raw, 200)))
		return
	}
	if f.Completed == nil || f.Messages == nil {
		s.run.deviation(fmt.Sprintf("messages frame lacks messages (array) or completed: %s", truncate(raw, 200)))
		st.syncing = false
		return
	}
	s.run.stats.syncPages.Add(1)
	var last int64
	for i := range f.Messages {
		m := &f.Messages[i]
		if len(m.Conv) == 0 {
			m.Conv = st.convBytes
		}
		if m.Seq <= last {
			s.run.stats.orderViolations.Add(1)
		}
		last = m.Seq
		s.deliverLocked(m, false, now)
	}
	switch {
	case !*f.Completed && len(f.Messages) > 0:
		s.sendSyncLocked(st, last)
	case !*f.Completed:
		s.run.deviation(fmt.Sprintf("sync page with no messages but completed:false: %s", truncate(raw, 200)))
		st.syncing = false
	default:
		// Completed: whatever is missing up to max_seq does not exist for
		// this session (PROTOCOL.md guarantee 5), so no pull waits for it.
		if f.MaxSeq > st.contig {
			st.contig = f.MaxSeq
			st.advance()
		}
		if st.again {
			st.again = false
			s.sendSyncLocked(st, st.contig)
		} else {
			st.syncing = false
		}
	}
}

// sendAcks sends cumulative acks for the conversations that moved since the
// last ack, all in one write; the acker calls it every second, as a client
// would. buf and ends are the acker's, reused from session to session.
func (s *session) sendAcks(buf []byte, ends []int) ([]byte, []int) {
	buf, ends = buf[:0], ends[:0]
	s.mu.Lock()
	wc := s.conn
	if wc != nil {
		for _, st := range s.convList {
			if st.contig > st.acked {
				st.acked = st.contig
				buf = fmt.Appendf(buf, `{"type":"ack","conv":%s,"seq":%d}`, st.convJSON, st.contig)
				ends = append(ends, len(buf))
			}
		}
	}
	s.mu.Unlock()
	if len(ends) > 0 {
		wc.writeFrames(buf, ends)
	}
	return buf, ends
}

func (s *session) syncing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.convList {
		if st.syncing {
			return true
		}
	}
	return false
}
