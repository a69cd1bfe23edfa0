package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// The team mix (--mix team; the mixed scenario's default): among the sends,
// 10% reactions, 3% edits and 1% deletes, each of one of the sender's own
// earlier messages of that conversation, the way a team works (PROTOCOL.md
// v1.1: mutations are messages with seqs, delivered and pulled like text).
// The sender folds what it confirmed; at the end a sample of the mutated
// messages is pulled and each must equal its fold.
const (
	mixReaction = 0.10
	mixEdit     = 0.03
	mixDelete   = 0.01
	// mixOwnKept bounds the own messages a session remembers per
	// conversation as targets.
	mixOwnKept = 256
	// mixSample is how many mutated messages the correctness check pulls.
	mixSample = 200
)

var mixEmoji = []string{"+1", "tada", "eyes"}

// Kinds of a bench send.
const (
	sendText = iota
	sendReaction
	sendEdit
	sendDelete
)

// mutation is what a send changes besides being a message.
type mutation struct {
	kind   int
	target int64
	emoji  string
	on     bool
}

// ownMsg is a text message this session sent and may mutate.
type ownMsg struct {
	seq    int64
	sentAt time.Duration // rebuilds its body
}

// fold is the state a mutated message should be pulled in.
type fold struct {
	sentAt   time.Duration // of the original body
	editedAt time.Duration // of the last edit's body; 0 for none
	deleted  bool
	on       map[string]bool
}

// teamConv is one session's mix state of one conversation. It is guarded
// by the session's lock.
type teamConv struct {
	own     []ownMsg
	reacted map[int64]map[string]bool // as sent (decided at send time)
	folds   map[int64]*fold           // as confirmed, in seq order
}

func (st *recvState) team() *teamConv {
	if st.mix == nil {
		st.mix = &teamConv{reacted: map[int64]map[string]bool{}, folds: map[int64]*fold{}}
	}
	return st.mix
}

// pickMutation decides what a send into st is (under s.mu).
func (s *session) pickMutation(st *recvState) mutation {
	if !s.run.mix {
		return mutation{}
	}
	tc := st.team()
	if len(tc.own) == 0 {
		return mutation{}
	}
	x := rand.Float64()
	i := rand.IntN(len(tc.own))
	target := tc.own[i].seq
	switch {
	case x < mixDelete:
		// Gone from the targets at once: nothing sent after may touch it.
		tc.own = append(tc.own[:i], tc.own[i+1:]...)
		return mutation{kind: sendDelete, target: target}
	case x < mixDelete+mixEdit:
		return mutation{kind: sendEdit, target: target}
	case x < mixDelete+mixEdit+mixReaction:
		e := mixEmoji[rand.IntN(len(mixEmoji))]
		if tc.reacted[target] == nil {
			tc.reacted[target] = map[string]bool{}
		}
		on := !tc.reacted[target][e]
		tc.reacted[target][e] = on
		return mutation{kind: sendReaction, target: target, emoji: e, on: on}
	}
	return mutation{}
}

// appendMutationFrame writes the send frame of a mutation; an edit's body
// is a bench body of its own.
func appendMutationFrame(b []byte, convJSON []byte, cmidPrefix string, n int, sent time.Duration, body bodySpec, mu mutation) []byte {
	b = append(b, `{"type":"send","req":"`...)
	b = appendCmid(b, cmidPrefix, n)
	b = append(b, `","conv":`...)
	b = append(b, convJSON...)
	b = append(b, `,"client_msg_id":"`...)
	b = appendCmid(b, cmidPrefix, n)
	b = append(b, `","target":`...)
	b = strconv.AppendInt(b, mu.target, 10)
	switch mu.kind {
	case sendEdit:
		b = append(b, `,"kind":"edit","body":"`...)
		b = appendBody(b, sent, body)
		b = append(b, '"')
	case sendDelete:
		b = append(b, `,"kind":"delete"`...)
	case sendReaction:
		b = append(b, `,"kind":"reaction","emoji":"`...)
		b = append(b, mu.emoji...)
		b = append(b, `","on":`...)
		b = strconv.AppendBool(b, mu.on)
	}
	return append(b, '}')
}

// appendFrame writes the frame of a pending send.
func (s *session) appendFrame(b []byte, p pendingSend, n int) []byte {
	if p.mu.kind == sendText {
		return appendSendFrame(b, p.st.convJSON, s.cmidPrefix, n, p.sentAt, s.run.opts.body())
	}
	return appendMutationFrame(b, p.st.convJSON, s.cmidPrefix, n, p.sentAt, s.run.opts.body(), p.mu)
}

// confirmedMix folds a confirmed send into st (under s.mu); sends of one
// session are answered in order, so this is seq order.
func (st *recvState) confirmedMix(p pendingSend, seq int64) {
	tc := st.team()
	if p.mu.kind == sendText {
		tc.own = append(tc.own, ownMsg{seq: seq, sentAt: p.sentAt})
		if len(tc.own) > mixOwnKept {
			tc.own = tc.own[len(tc.own)-mixOwnKept:]
		}
		return
	}
	f := tc.folds[p.mu.target]
	if f == nil {
		f = &fold{sentAt: -1, on: map[string]bool{}}
		for _, o := range tc.own {
			if o.seq == p.mu.target {
				f.sentAt = o.sentAt
			}
		}
		tc.folds[p.mu.target] = f
	}
	switch p.mu.kind {
	case sendEdit:
		f.editedAt = p.sentAt
	case sendDelete:
		f.deleted = true
	case sendReaction:
		f.on[p.mu.emoji] = p.mu.on
	}
}

// checkFolds pulls a sample of the mutated messages and compares each with
// its fold: the correctness line counts every difference as a deviation.
func (r *run) checkFolds(ctx context.Context) {
	if !r.mix {
		return
	}
	type item struct {
		s      *session
		conv   string
		target int64
		f      fold
	}
	var all []item
	for _, s := range r.sessions {
		s.mu.Lock()
		for _, st := range s.convList {
			if st.mix == nil {
				continue
			}
			for t, f := range st.mix.folds {
				if f.sentAt >= 0 {
					all = append(all, item{s, st.conv, t, *f})
				}
			}
		}
		s.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool { return all[i].target < all[j].target })
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	if len(all) > mixSample {
		all = all[:mixSample]
	}
	good := 0
	for _, it := range all {
		p, err := r.api.messagesAfter(ctx, it.s.user.token, it.conv, it.target-1, 1)
		if err != nil || len(p.Messages) == 0 || p.Messages[0].Seq != it.target {
			r.deviation(fmt.Sprintf("folded check: pulling seq %d of %s: %v", it.target, it.conv, err))
			continue
		}
		if why := it.f.differs(&p.Messages[0], it.s.user.id, r.opts.body()); why != "" {
			r.deviation(fmt.Sprintf("folded check: seq %d of %s pulled unlike its stream: %s", it.target, it.conv, why))
			continue
		}
		good++
	}
	r.note("folded", fmt.Sprintf("%d of %d sampled mutated messages pulled as their streams fold", good, len(all)))
}

// differs says how m is not the fold f ("" when it is).
func (f *fold) differs(m *wireMessage, me string, body bodySpec) string {
	if f.deleted {
		if !m.Deleted || m.Body != "" || len(m.Reactions) != 0 {
			return fmt.Sprintf("deleted: want deleted, empty, no reactions; got deleted=%v body %d bytes, %d reactions", m.Deleted, len(m.Body), len(m.Reactions))
		}
		return ""
	}
	at := f.sentAt
	if f.editedAt != 0 {
		at = f.editedAt
		if m.EditedAt == 0 {
			return "edited, but no edited_at"
		}
	}
	if want := string(appendBody(nil, at, body)); m.Body != want {
		return fmt.Sprintf("body %q, want %q", m.Body, want)
	}
	want := map[string]bool{}
	for e, on := range f.on {
		if on {
			want[e] = true
		}
	}
	got := map[string]bool{}
	for _, rc := range m.Reactions {
		if len(rc.Users) != 1 || rc.Users[0] != me {
			return fmt.Sprintf("reaction %s by %v, want by the sender alone", rc.Emoji, rc.Users)
		}
		got[rc.Emoji] = true
	}
	if len(got) != len(want) {
		return fmt.Sprintf("reactions %v, want %v", got, want)
	}
	for e := range want {
		if !got[e] {
			return fmt.Sprintf("reactions %v, want %v", got, want)
		}
	}
	return ""
}
