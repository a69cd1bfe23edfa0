package server

import (
	"encoding/json"

	"github.com/imserver/imserver/chat"
)

// batchItems are the frames of one batch event: the messages split into
// frames of at most maxBatch messages and about maxBatchBytes, so that a
// storm's batch fits the read limit of common client libraries.
type batchItems struct {
	items []*outItem
	count []int // messages in each item
}

// deliverBatch queues a batch event (storm mode). The frames are encoded
// once for everyone; a session that sent some of the messages got `sent`
// for them, so it gets frames of the others, encoded once for it.
func (h *Hub) deliverBatch(users []string, ev *chat.Event, held heldWriters) {
	enc := make([][]byte, len(ev.Messages))
	var origins map[string]bool
	for i := range ev.Messages {
		m := &ev.Messages[i]
		b, err := json.Marshal(m)
		if err != nil {
			h.log.Error("encoding event", "type", ev.Type, "err", err)
			return
		}
		enc[i] = b
		if m.Origin != "" {
			if origins == nil {
				origins = make(map[string]bool)
			}
			origins[m.Origin] = true
		}
	}
	all := splitBatch(ev.Conv, enc)
	var own map[string]batchItems // per origin session
	n := 0
	h.mu.RLock()
	for _, u := range users {
		for s := range h.users[u] {
			items := all
			if origins[s.id] {
				var ok bool
				if items, ok = own[s.id]; !ok {
					var mine [][]byte
					for i := range ev.Messages {
						if ev.Messages[i].Origin != s.id {
							mine = append(mine, enc[i])
						}
					}
					items = splitBatch(ev.Conv, mine)
					if own == nil {
						own = make(map[string]batchItems)
					}
					own[s.id] = items
				}
			}
			for i, it := range items.items {
				s.enqueue(it, held)
				n += items.count[i]
			}
		}
	}
	h.mu.RUnlock()
	h.metrics.Deliveries.Add(float64(n))
}

// splitBatch builds the batch frames of encoded messages. Each item's msg
// is its messages joined by commas, a slice of the frame itself, so that
// the session's writer can coalesce it with neighbouring messages of the
// conversation as it does single ones.
func splitBatch(conv string, enc [][]byte) batchItems {
	var out batchItems
	for start := 0; start < len(enc); {
		end, size := start+1, len(enc[start])
		for end < len(enc) && end-start < maxBatch && size+len(enc[end])+1 <= maxBatchBytes {
			size += len(enc[end]) + 1
			end++
		}
		frame := batchFrame(conv, enc[start:end])
		head := len(frame) - size - len("]}")
		out.items = append(out.items, &outItem{conv: conv, frame: frame, msg: frame[head : head+size : head+size]})
		out.count = append(out.count, end-start)
		start = end
	}
	return out
}
