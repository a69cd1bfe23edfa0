package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/cork"
)

// outItem is one frame waiting in a session's queue. Messages also carry
// their own encoding, so that consecutive ones of a conversation can leave
// as one batch frame.
type outItem struct {
	conv  string
	frame []byte
	msg   []byte
	// reply is an answer to this session's own request (sent, messages,
	// pong, error): its place among pushed frames does not matter, so it
	// does not stop messages around it from being coalesced.
	reply bool
	// slot is the answer to a send, which holds a slot of the inflight
	// bound until the writer takes it (send_answer.go).
	slot bool
}

// maxBatch and maxBatchBytes bound what is coalesced into one batch frame,
// so that it fits the default read limit of common client libraries
// (32 KiB) unless a single message is that large.
const (
	maxBatch      = 256
	maxBatchBytes = 16 << 10
)

// session is one WebSocket connection of a user.
type session struct {
	id        string
	user      chat.User
	tokenHash string // hex, as revocations name it
	token     []byte // the hash itself, for keepAliveLoop
	created   int64  // when the session began (Unix ms), for its max age
	conn      *websocket.Conn
	wire      *cork.Conn
	srv       *Server

	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// queue holds the frames waiting for the writer, at most
	// cfg.SessionQueue. It is allocated when something is queued and
	// dropped when the writer finds it empty, so an idle session keeps
	// none of it.
	queue    []*outItem
	room     chan struct{}   // closed when the writer takes the queue; made by a waiting reply
	cut      map[string]bool // convs whose live stream was cut
	overflow bool            // a frame other than a message was dropped
	closed   bool
	writing  bool // a writeLoop goroutine is running

	inflight chan struct{} // bounds pipelined sends and queued requests
	sendMu   sync.Mutex
	sends    []*pendingSend // unanswered sends, in arrival order (send_answer.go)

	taskMu  sync.Mutex
	tasks   []func() // requests for the worker, in order
	working bool     // a work goroutine is running
}

func newSession(srv *Server, conn *websocket.Conn, w *cork.Conn, user chat.User, sess chat.Session) *session {
	// Not a child of the server's context: every child costs an entry in
	// its parent's map, per idle session. Shutdown closes each session
	// itself (and run refuses to start once it began), and every close
	// closes the connection, which ends the reads.
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		id:        chat.NewID(),
		user:      user,
		tokenHash: hex.EncodeToString(sess.TokenHash),
		token:     sess.TokenHash,
		created:   sess.CreatedAt,
		conn:      conn,
		wire:      w,
		srv:       srv,
		ctx:       ctx,
		cancel:    cancel,
		inflight:  make(chan struct{}, srv.cfg.SessionQueue),
		// hello holds the writer's place until it is written.
		writing: true,
	}
}

// run serves the session until the connection ends; v is the user's
// largest version, for hello.
func (s *session) run(v int64) {
	defer s.cancel()
	s.srv.hub.add(s)
	defer s.srv.hub.remove(s)
	if s.srv.closing.Load() {
		// Shutdown's CloseAll may have run before add.
		s.close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	s.srv.presence.opened(s.user.ID)
	defer s.srv.presence.closed(s.user.ID)
	online := []string{}
	if contacts, err := s.srv.chat.Contacts(s.ctx, s.user.ID); err == nil {
		online = s.srv.presence.online(s.ctx, contacts)
	}
	// hello goes first: events delivered since add wait in the queue, and
	// no writer starts (writing is set) until hello is out.
	hello, _ := json.Marshal(helloFrame{Type: "hello", User: s.user, Session: s.id, Sequences: sequences{Conversations: v}, Online: online})
	if err := s.write(hello); err != nil {
		return
	}
	s.mu.Lock()
	s.writing = false
	s.startWriterLocked()
	s.mu.Unlock()
	s.readLoop()
}

func (s *session) readLoop() {
	for {
		// No context of its own (the library would hold a timer and a
		// channel for it while the session waits): closing the session
		// closes the connection, which ends the read.
		typ, r, err := s.conn.Reader(context.Background())
		if err == nil && typ != websocket.MessageText {
			s.close(websocket.StatusUnsupportedData, "binary frames are not supported")
			return
		}
		var buf *bytes.Buffer
		if err == nil {
			// A pooled buffer, taken once a frame has arrived: waiting
			// sessions hold none. Decoding copies what it keeps.
			buf = frameBufs.Get().(*bytes.Buffer)
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			if buf != nil {
				buf.Reset()
				frameBufs.Put(buf)
			}
			// Over the read limit the library has already closed with 1009.
			s.close(websocket.StatusNormalClosure, "")
			return
		}
		f, err := decodeFrame(buf.Bytes())
		buf.Reset()
		if buf.Cap() <= 64<<10 {
			frameBufs.Put(buf)
		}
		if err != nil {
			s.reply(errorFrameOf(f.Req, err))
			continue
		}
		s.handle(&f)
	}
}

var frameBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (s *session) handle(f *clientFrame) {
	ctx := s.ctx
	switch f.Type {
	case frameSend:
		if !s.acquire() {
			return
		}
		req := sendRequest(f.Conv, f.ClientMsgID, f.Body, f.Kind, f.Target, f.Emoji, f.On, f.ReplyTo, f.Attachments)
		req.Origin = s.id
		p := s.pending(f.Req)
		s.srv.chat.SubmitNotify(ctx, s.user.ID, req, func(m chat.Message, dup bool, err error) { s.answered(p, &m, dup, err) })
	case frameAck:
		req, conv, seq := f.Req, f.Conv, *f.Seq
		s.later(func() {
			if err := s.srv.chat.Ack(ctx, s.user.ID, conv, seq); err != nil {
				s.reply(errorFrameOf(req, err))
			}
		})
	case frameRead:
		req, conv, seq := f.Req, f.Conv, *f.Seq
		s.later(func() {
			if err := s.srv.chat.Read(ctx, s.user.ID, s.id, conv, seq); err != nil {
				s.reply(errorFrameOf(req, err))
			}
		})
	case frameSync:
		req, conv := f.Req, f.Conv
		q := chat.PageQuery{After: *f.AfterSeq}
		if f.Limit != nil {
			q.Limit = int(*f.Limit)
		}
		s.later(func() {
			p, err := s.srv.chat.Messages(ctx, s.user.ID, conv, q)
			if err != nil {
				s.reply(errorFrameOf(req, err))
				return
			}
			s.reply(messagesFrame{Type: "messages", Req: req, Conv: conv, Messages: p.Messages, MaxSeq: p.MaxSeq, Completed: p.Completed})
		})
	case framePing:
		// Answered after the acks, reads and syncs before it (later): a
		// client may use a ping as a barrier.
		pong := pongFrame{Type: "pong", Req: f.Req}
		if s.busy() {
			s.later(func() { s.reply(pong) })
		} else {
			s.reply(pong)
		}
	case frameTyping:
		// Relayed from the reader: a cached roster and a queue per
		// recipient, nothing that waits for the database's writer.
		s.srv.chat.Typing(ctx, s.user.ID, f.Conv)
	}
}

// later runs a request that may reach the database (ack, read, sync) on a
// worker goroutine, started on demand, which takes them in order and ends
// when none is left. The reader goes on reading meanwhile, and its stack,
// which every idle session keeps, does not grow to the database's depth.
// Queued requests share the bound of pipelined sends.
func (s *session) later(fn func()) {
	if !s.acquire() {
		return
	}
	s.taskMu.Lock()
	s.tasks = append(s.tasks, fn)
	start := !s.working
	s.working = true
	s.taskMu.Unlock()
	if start {
		go s.work()
	}
}

// busy reports whether requests wait for the worker of later.
func (s *session) busy() bool {
	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	return s.working
}

func (s *session) work() {
	for {
		s.taskMu.Lock()
		if len(s.tasks) == 0 {
			s.working = false
			s.tasks = nil
			s.taskMu.Unlock()
			return
		}
		fn := s.tasks[0]
		s.tasks[0] = nil
		s.tasks = s.tasks[1:]
		s.taskMu.Unlock()
		fn()
		<-s.inflight
	}
}

// acquire takes a slot of the inflight bound, waiting for one unless the
// session ends. The common case does not touch the context's channel,
// which would then be allocated for good.
func (s *session) acquire() bool {
	select {
	case s.inflight <- struct{}{}:
		return true
	default:
	}
	select {
	case s.inflight <- struct{}{}:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// reply queues an answer to this session's own request. Unlike pushed
// events it waits for room: only this client, which is not reading, is
// slowed down.
func (s *session) reply(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.srv.log.Error("encoding reply", "err", err)
		return
	}
	s.replyFrame(b)
}

// replyFrame queues an encoded answer, as reply does.
func (s *session) replyFrame(b []byte) {
	it := &outItem{frame: b, reply: true}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if len(s.queue) < s.srv.cfg.SessionQueue {
			s.queue = append(s.queue, it)
			s.startWriterLocked()
			s.mu.Unlock()
			return
		}
		if s.room == nil {
			s.room = make(chan struct{})
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-s.ctx.Done():
			return
		}
	}
}

// kick starts the writer unless it runs. The writer exits when the queue is
// empty, so an idle session costs no goroutine (and no stack) for writing.
func (s *session) kick() {
	s.mu.Lock()
	s.startWriterLocked()
	s.mu.Unlock()
}

func (s *session) startWriterLocked() {
	if !s.writing && !s.closed {
		if s.srv.hub.hold(s) {
			return // started when the hub's Gather ends
		}
		s.writing = true
		go s.writeLoop()
	}
}

// enqueue queues a pushed event without waiting. A full queue cuts the
// conversation's live stream (the client gets `resync` once there is room
// again and catches up with `sync`); a lost non-message event closes the
// session, since the client could not know what it missed.
//
// With held non-nil the writer is not started but the session is added to
// held, for the caller to kick once it has queued the rest, unless the
// queue is half full already.
func (s *session) enqueue(it *outItem, held heldWriters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.overflow {
		return
	}
	if it.msg != nil && s.cut[it.conv] {
		return
	}
	if len(s.queue) < s.srv.cfg.SessionQueue {
		s.queue = append(s.queue, it)
		if held != nil && !s.writing && len(s.queue) < s.srv.cfg.SessionQueue/2 {
			held[s] = struct{}{}
			return
		}
		s.startWriterLocked()
		return
	}
	s.srv.metrics.SlowCuts.Inc()
	if it.msg == nil {
		s.overflow = true
		return
	}
	if s.cut == nil {
		s.cut = make(map[string]bool)
	}
	s.cut[it.conv] = true
}

func (s *session) writeLoop() {
	if d := s.srv.cfg.WriteDelay; d > 0 {
		time.Sleep(d)
	}
	var items []*outItem
	// The write loop ends whenever the queue runs dry: the coalescer's
	// buffers go back to a pool shared by every session, not kept by an
	// idle one.
	batcher := coalescers.Get().(*coalescer)
	defer batcher.release()
	for {
		items = s.drain(items)
		if len(items) == 0 {
			if s.ctx.Err() != nil || !s.resume() || s.idle() {
				return
			}
			continue
		}
		if err := s.writeRound(batcher.round(items)); err != nil {
			s.giveUp(websocket.StatusGoingAway, "write failed")
			return
		}
		if !s.resume() {
			return
		}
	}
}

// drain takes everything queued, without waiting, and gives the queue the
// writer's previous (emptied) slice to fill meanwhile.
func (s *session) drain(prev []*outItem) []*outItem {
	clear(prev)
	s.mu.Lock()
	items := s.queue
	s.queue = prev[:0]
	if s.room != nil {
		close(s.room)
		s.room = nil
	}
	s.mu.Unlock()
	s.releaseSlots(items)
	return items
}

// coalescer turns queued items into frames: messages of one conversation
// become one batch frame (placed where the first of them stood), so a
// session in ten busy groups gets a frame per group rather than per message.
// Order is kept within each conversation; pushed events other than
// messages (read, receipt, storm, conversation) are barriers no message
// crosses, while replies stay in place without being barriers.
//
// A session's write loop takes one from a pool and keeps its buffers from
// round to round: a round's frames are written before the next round is
// built (the socket copies them out), so the batch frames of one round can
// be built where the previous round's were. Built anew each round, they
// were the server's largest allocation under load, and the garbage
// collector ran for them.
type coalescer struct {
	frames  [][]byte
	entries []coalesceEntry
	of      []int          // the entry of each item
	open    map[string]int // the conversation's open entry, by index
	seen    map[string]struct{}
	parts   [][]byte // every entry's parts, grouped by entry
	buf     []byte   // the round's batch frames, back to back
}

var coalescers = sync.Pool{New: func() any { return new(coalescer) }}

// maxKeptBuffer bounds the batch-frame buffer a pooled coalescer keeps: a
// round of small messages fits many times over; the rare round of big
// ones allocates its own.
const maxKeptBuffer = 256 << 10

// release returns c to the pool, without a buffer a rare huge round grew.
func (c *coalescer) release() {
	if cap(c.buf) > maxKeptBuffer {
		c.buf = nil
	}
	clear(c.frames[:cap(c.frames)])
	clear(c.parts[:cap(c.parts)])
	clear(c.entries[:cap(c.entries)])
	coalescers.Put(c)
}

// coalesceEntry is one frame of a round: an item alone, or the first of
// a conversation's messages and the count and size of them all.
type coalesceEntry struct {
	first *outItem
	n     int // messages in it; 0 for an item that is not a message
	size  int
	at    int // where its parts start in parts
}

// round returns items' frames, valid until the next call.
func (c *coalescer) round(items []*outItem) [][]byte {
	c.frames = c.frames[:0]
	if !c.repeatsConv(items) {
		// The common case (one message per conversation and round, as when
		// people talk): every item is its own frame.
		for _, it := range items {
			c.frames = append(c.frames, it.frame)
		}
		return c.frames
	}
	if c.open == nil {
		c.open = make(map[string]int)
	}
	clear(c.open)
	c.entries, c.of = c.entries[:0], c.of[:0]
	for _, it := range items {
		if it.msg == nil {
			c.entries = append(c.entries, coalesceEntry{first: it})
			c.of = append(c.of, -1)
			if !it.reply {
				clear(c.open)
			}
			continue
		}
		i, ok := c.open[it.conv]
		if !ok || c.entries[i].n >= maxBatch || c.entries[i].size+len(it.msg) > maxBatchBytes {
			i = len(c.entries)
			c.entries = append(c.entries, coalesceEntry{first: it})
			c.open[it.conv] = i
		}
		c.entries[i].n++
		c.entries[i].size += len(it.msg)
		c.of = append(c.of, i)
	}
	// Each entry's parts side by side in parts, in item order.
	at := 0
	for i := range c.entries {
		c.entries[i].at = at
		at += c.entries[i].n
	}
	c.parts = slices.Grow(c.parts[:0], at)[:at]
	for i := range c.entries {
		c.entries[i].n = 0 // counts again as the parts go in
	}
	for k, it := range items {
		if i := c.of[k]; i >= 0 {
			e := &c.entries[i]
			c.parts[e.at+e.n] = it.msg
			e.n++
		}
	}
	c.buf = c.buf[:0]
	for i := range c.entries {
		e := &c.entries[i]
		if e.n <= 1 {
			c.frames = append(c.frames, e.first.frame)
			continue
		}
		start := len(c.buf)
		c.buf = appendBatchFrame(c.buf, e.first.conv, c.parts[e.at:e.at+e.n])
		c.frames = append(c.frames, c.buf[start:len(c.buf):len(c.buf)])
	}
	return c.frames
}

// repeatsConv reports whether two messages in items are of one
// conversation, which round would then batch.
func (c *coalescer) repeatsConv(items []*outItem) bool {
	if len(items) > 16 {
		if c.seen == nil {
			c.seen = make(map[string]struct{})
		}
		clear(c.seen)
		for _, it := range items {
			if it.msg == nil {
				continue
			}
			if _, ok := c.seen[it.conv]; ok {
				return true
			}
			c.seen[it.conv] = struct{}{}
		}
		return false
	}
	for i, it := range items {
		if it.msg == nil {
			continue
		}
		for _, o := range items[:i] {
			if o.msg != nil && o.conv == it.conv {
				return true
			}
		}
	}
	return false
}

// idle stops the writer when nothing is queued; an item queued later
// starts a new one.
func (s *session) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 || len(s.cut) > 0 {
		return false
	}
	s.queue = nil
	s.writing = false
	return true
}

// resume sends `resync` for the cut conversations once the queue has room
// again. It returns false when the session was closed instead.
func (s *session) resume() bool {
	s.mu.Lock()
	if s.overflow {
		s.mu.Unlock()
		s.giveUp(websocket.StatusTryAgainLater, "too slow: reconnect and sync")
		return false
	}
	if len(s.cut) == 0 || len(s.queue) > s.srv.cfg.SessionQueue/2 {
		s.mu.Unlock()
		return true
	}
	cut := s.cut
	s.cut = nil
	s.mu.Unlock()
	for conv := range cut {
		b, _ := json.Marshal(convFrame{Type: "resync", Conv: conv})
		if err := s.write(b); err != nil {
			s.giveUp(websocket.StatusGoingAway, "write failed")
			return false
		}
	}
	return true
}

// writeRound writes the frames of one drained round corked, so that they
// leave in one write call (or a few, for large rounds).
//
// The frames are handed to the library without a context of their own (it
// would arm a timer per frame): the cork's write deadline bounds the
// socket writes, and closing the session ends a wait for the library's
// lock.
func (s *session) writeRound(frames [][]byte) error {
	s.wire.Cork(time.Now().Add(s.srv.cfg.WriteTimeout))
	n := 0
	for _, b := range frames {
		if err := s.conn.Write(context.Background(), websocket.MessageText, b); err != nil {
			s.wire.Uncork()
			return err
		}
		n += len(b)
	}
	if err := s.wire.Uncork(); err != nil {
		return err
	}
	s.srv.metrics.Frames.Add(float64(len(frames)))
	s.srv.metrics.Bytes.Add(float64(n))
	return nil
}

func (s *session) write(b []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.srv.cfg.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return err
	}
	s.srv.metrics.Frames.Inc()
	s.srv.metrics.Bytes.Add(float64(len(b)))
	return nil
}

// giveUp closes a session whose writer gave up on it (its reader stalled)
// and drops what is queued: nothing more will be written, and the queue,
// full of frames, is let go at once rather than when the close timer lets
// go of the session. A session closed otherwise (a shutdown, a logout)
// keeps its queue for the writer to send what it can before the close.
func (s *session) giveUp(code websocket.StatusCode, reason string) {
	s.close(code, reason)
	s.mu.Lock()
	dropped := s.queue
	s.queue, s.cut = nil, nil
	s.mu.Unlock()
	s.releaseSlots(dropped)
}

// close ends the session once; the closing handshake runs in the
// background so that the caller (a shutdown, a logout) is not held up.
func (s *session) close(code websocket.StatusCode, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	go func() {
		err := s.conn.Close(code, reason)
		if err != nil && !errors.Is(err, context.Canceled) {
			s.srv.log.Debug("closing websocket", "session", s.id, "err", err)
		}
		s.cancel()
	}()
	// Give the handshake a moment, then end the reads regardless.
	time.AfterFunc(5*time.Second, func() {
		s.conn.CloseNow()
		s.cancel()
	})
}
