package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
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
	ctx       context.Context // of the current connection
	conn      *wsConn
	convs     map[string]*recvState
	convList  []*recvState
	pending   map[string]*pendingSend // by client_msg_id (also the req)
	nextCmid  int
	lastDeliv time.Duration // since run epoch, of the last live delivery

	window chan struct{} // in-flight sends
}

type wsConn struct {
	c      *websocket.Conn
	closed atomic.Bool // closed on purpose: a read error is not a disconnect
}

type pendingSend struct {
	st     *recvState
	frame  []byte
	sentAt time.Duration
	tries  int
}

func newSession(id int, u *benchUser, r *run) *session {
	return &session{id: id, user: u, run: r, convs: map[string]*recvState{}, pending: map[string]*pendingSend{},
		window: make(chan struct{}, max(1, r.opts.Inflight))}
}

func (s *session) addConv(conv string) {
	if s.convs[conv] != nil {
		return
	}
	st := &recvState{conv: conv, convJSON: quoteJSON(conv)}
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
	c, resp, err := websocket.Dial(dctx, s.run.api.wsURL(s.user.token), &websocket.DialOptions{HTTPClient: s.run.wsHTTP})
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
	f, err := decodeFrame(b)
	if err != nil || f.Type != "hello" {
		c.CloseNow()
		return fmt.Errorf("ws user %s: first frame is not hello, PROTOCOL.md says the server sends hello on connect: got %s", s.user.name, truncate(b, 200))
	}
	wc := &wsConn{c: c}
	s.mu.Lock()
	s.conn, s.ctx = wc, ctx
	for _, st := range s.convList {
		// Pulls and the live order belong to a connection.
		st.liveLast, st.syncing, st.again = 0, false, false
	}
	s.mu.Unlock()
	go s.read(ctx, wc)
	if pull {
		s.mu.Lock()
		for _, st := range s.convList {
			s.startSyncLocked(ctx, st)
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

func (s *session) write(ctx context.Context, b []byte) error {
	s.mu.Lock()
	wc := s.conn
	s.mu.Unlock()
	if wc == nil {
		return errors.New("session offline")
	}
	return wc.c.Write(ctx, websocket.MessageText, b)
}

func (s *session) read(ctx context.Context, wc *wsConn) {
	for {
		_, b, err := wc.c.Read(ctx)
		if err != nil {
			if wc.closed.Load() || ctx.Err() != nil {
				return
			}
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
		s.handle(ctx, b)
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

func (s *session) handle(ctx context.Context, b []byte) {
	f, err := decodeFrame(b)
	if err != nil {
		s.run.deviation(fmt.Sprintf("server frame is not JSON: %s", truncate(b, 200)))
		return
	}
	now := s.run.now()
	switch f.Type {
	case "msg":
		m := f.Message
		if m == nil || m.Conv == "" || m.Seq <= 0 {
			s.run.deviation(fmt.Sprintf("msg frame without a valid message object: %s", truncate(b, 200)))
			return
		}
		s.mu.Lock()
		s.deliverLocked(*m, true, now)
		s.mu.Unlock()
	case "batch":
		s.run.stats.batchFrames.Add(1)
		s.mu.Lock()
		for _, m := range f.Messages {
			if m.Conv == "" {
				m.Conv = f.Conv
			}
			s.deliverLocked(m, true, now)
		}
		s.mu.Unlock()
	case "sent":
		m := f.Message
		if m == nil || m.Conv == "" || m.Seq <= 0 {
			s.run.deviation(fmt.Sprintf("sent frame without a valid message object: %s", truncate(b, 200)))
			return
		}
		s.confirm(f.Req, *m, f.Duplicate, now)
	case "messages":
		s.syncPage(ctx, f, now, b)
	case "resync":
		s.run.stats.resyncs.Add(1)
		s.mu.Lock()
		if st := s.convs[f.Conv]; st != nil {
			st.resynced = true
			s.startSyncLocked(ctx, st)
		}
		s.mu.Unlock()
	case "error":
		s.frameError(ctx, f, b)
	case "storm":
		if f.Active {
			s.run.stats.storms.Add(1)
		}
	case "hello", "pong", "read", "receipt", "conversation":
	default:
		s.run.stats.unknownFrames.Add(1)
	}
}

// deliverLocked accounts one received message. On the live path the seqs of
// a conversation must rise within one connection: a seq at or below the last
// one already held is a duplicate, below it and new is an order violation.
// Pulls may overlap what live delivery brought; that overlap is not counted.
func (s *session) deliverLocked(m wireMessage, live bool, now time.Duration) {
	st := s.convs[m.Conv]
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
			s.run.stats.orderViolations.Add(1)
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
		s.startSyncLocked(s.ctx, st)
	}
}

// ownMessage reports whether this session sent m: the bench's
// client_msg_ids start with the sending session's id.
func (s *session) ownMessage(m wireMessage) bool {
	if m.From != s.user.id || !strings.HasPrefix(m.ClientMsgID, strconv.Itoa(s.id)) {
		return false
	}
	return strings.HasPrefix(m.ClientMsgID[len(strconv.Itoa(s.id)):], "-")
}

// send queues one `send` frame, waiting while the in-flight window is full.
func (s *session) send(ctx context.Context, st *recvState, bodySize int) error {
	select {
	case s.window <- struct{}{}:
	default:
		t := time.NewTimer(s.run.opts.DrainTimeout)
		select {
		case s.window <- struct{}{}:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			s.run.note("stall", fmt.Sprintf("session %d: no send answered for %s with %d in flight; it stopped sending", s.id, s.run.opts.DrainTimeout, cap(s.window)))
			return errors.New("sends not answered")
		}
	}
	now := s.run.now()
	s.mu.Lock()
	s.nextCmid++
	cmid := strconv.Itoa(s.id) + "-" + strconv.Itoa(s.nextCmid)
	frame := appendSendFrame(nil, st.convJSON, cmid, makeBody(now, bodySize))
	s.pending[cmid] = &pendingSend{st: st, frame: frame, sentAt: now}
	s.mu.Unlock()
	s.run.stats.attempted.Add(1)
	if err := s.write(ctx, frame); err != nil {
		s.mu.Lock()
		delete(s.pending, cmid)
		s.mu.Unlock()
		<-s.window
		s.run.sendError("write: " + err.Error())
		return err
	}
	return nil
}

func (s *session) confirm(req string, m wireMessage, dup bool, now time.Duration) {
	s.mu.Lock()
	p := s.pending[req]
	delete(s.pending, req)
	s.mu.Unlock()
	if p == nil {
		s.run.deviation(fmt.Sprintf("sent frame with req %q that matches no pending send", req))
		return
	}
	<-s.window
	if m.Conv != p.st.conv || m.ClientMsgID != req {
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
		s.mu.Unlock()
	}
}

// inflight is the number of sends not yet answered.
func (s *session) inflight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

func (s *session) frameError(ctx context.Context, f frame, b []byte) {
	s.run.stats.errorFrames.Add(1)
	if strings.HasPrefix(f.Req, "sync:") {
		s.run.deviation(fmt.Sprintf("sync answered with an error: %s", truncate(b, 200)))
		s.mu.Lock()
		if st := s.syncTarget(f.Req); st != nil {
			st.syncing = false
		}
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	p := s.pending[f.Req]
	retry := p != nil && (f.Code == "rate_limited" || f.Code == "unavailable") && p.tries < 5
	if p != nil && !retry {
		delete(s.pending, f.Req)
	}
	if retry {
		p.tries++
	}
	s.mu.Unlock()
	if p == nil {
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
	go func() {
		time.Sleep(wait)
		if err := s.write(ctx, p.frame); err != nil {
			s.mu.Lock()
			delete(s.pending, f.Req)
			s.mu.Unlock()
			<-s.window
			s.run.sendError("write: " + err.Error())
		}
	}()
}

// startSyncLocked pulls a conversation with `sync` frames from the end of
// what it holds without a gap, unless a pull is already running (it then
// runs once more).
func (s *session) startSyncLocked(ctx context.Context, st *recvState) {
	s.startSyncFromLocked(ctx, st, st.contig)
}

func (s *session) startSyncFromLocked(ctx context.Context, st *recvState, after int64) {
	if st.syncing {
		st.again = true
		return
	}
	st.syncing = true
	s.run.stats.syncChains.Add(1)
	s.sendSyncLocked(ctx, st, after)
}

func (s *session) sendSyncLocked(ctx context.Context, st *recvState, after int64) {
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
		if err := s.write(ctx, frame); err != nil {
			s.mu.Lock()
			st.syncing = false
			s.mu.Unlock()
		}
	}()
}

func (s *session) syncTarget(req string) *recvState {
	i, err := strconv.Atoi(strings.TrimPrefix(req, "sync:"))
	if err != nil || i < 0 || i >= len(s.convList) {
		return nil
	}
	return s.convList[i]
}

func (s *session) syncPage(ctx context.Context, f frame, now time.Duration, raw []byte) {
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
	for _, m := range f.Messages {
		if m.Conv == "" {
			m.Conv = st.conv
		}
		if m.Seq <= last {
			s.run.stats.orderViolations.Add(1)
		}
		last = m.Seq
		s.deliverLocked(m, false, now)
	}
	switch {
	case !*f.Completed && len(f.Messages) > 0:
		s.sendSyncLocked(ctx, st, last)
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
			s.sendSyncLocked(ctx, st, st.contig)
		} else {
			st.syncing = false
		}
	}
}

// ackFrames builds cumulative acks for conversations that moved since the
// last ack; the acker sends them every second, as a client would.
func (s *session) ackFrames() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	var out [][]byte
	for _, st := range s.convList {
		if st.contig > st.acked {
			st.acked = st.contig
			out = append(out, fmt.Appendf(nil, `{"type":"ack","conv":%s,"seq":%d}`, st.convJSON, st.contig))
		}
	}
	return out
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
