package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// senderPair is two senders into one conversation until halted, one over
// HTTP and one over a socket, each one message at a time so that every
// answer's latency is its own. Every answer is recorded; a failed one is
// followed by backoff, as a client backing off, and the next message.
type senderPair struct {
	mu      sync.Mutex
	results []sendResult
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func startSenders(p *lproc, token string, ws *wsClient, conv string, backoff time.Duration) *senderPair {
	s := &senderPair{stop: make(chan struct{})}
	run := func(name string, send func(id string) sendResult) {
		defer s.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			default:
			}
			res := send(fmt.Sprintf("%s-%d", name, i))
			res.Conv = conv
			s.mu.Lock()
			s.results = append(s.results, res)
			s.mu.Unlock()
			if !res.ok() {
				time.Sleep(backoff)
			}
		}
	}
	s.wg.Add(2)
	go run("http", func(id string) sendResult { return httpSend(p, token, conv, id, "x") })
	go run("ws", func(id string) sendResult { return ws.sendAndWait(conv, id, "x", 20*time.Second) })
	return s
}

// count is how many answers so far pred holds for.
func (s *senderPair) count(pred func(sendResult) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.results {
		if pred(r) {
			n++
		}
	}
	return n
}

// halt stops both senders, waits for their last answers and returns all.
func (s *senderPair) halt() []sendResult {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	return s.results
}

// waitCount waits until pred holds for n answers; past timeout it halts
// the senders, logs each one's last answers and fails the test.
func (s *senderPair) waitCount(t *testing.T, what string, timeout time.Duration, n int, pred func(sendResult) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s.count(pred) < n {
		if time.Now().After(deadline) {
			results := s.halt()
			for _, pfx := range []string{"http-", "ws-"} {
				var last []string
				for _, res := range results {
					if strings.HasPrefix(res.ID, pfx) {
						last = append(last, fmt.Sprintf("%s: %d %q seq %d err %v after %v", res.ID, res.Status, res.Code, res.Seq, res.Err, res.End.Sub(res.Start).Round(time.Millisecond)))
					}
				}
				t.Logf("last %s sends:\n%s", pfx, strings.Join(last[max(0, len(last)-5):], "\n"))
			}
			t.Fatalf("%s: only %d within %v", what, s.count(pred), timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
