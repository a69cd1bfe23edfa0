package bench

import "context"

// interactiveScenario measures what real people do: every sender sends one
// message and waits for its `sent` before the next (--inflight 1 unless
// given), each into a group of its own where it is the only sender, with
// --members (default 5) other members online, so every message makes 5
// deliveries.
//
// By default the other members are the other senders (--users = --senders):
// group i holds sender i and users i+1 .. i+M (mod P), so each session
// sends into one group and receives from M others, as people in a team do.
// With --users ≥ senders × (members+1) every group's members are listeners
// of their own, who only receive (P × (M+1) sessions, no session in two
// groups).
var interactiveScenario = &scenario{
	name:     "interactive",
	defaults: Sizes{Users: 100, Groups: 100, Members: 5, Sessions: 100, Senders: 100, Duration: 10e9},
	inflight: 1,
	adjust: func(sz *Sizes, given Sizes) {
		if given.Senders > 0 && given.Users == 0 {
			sz.Users = sz.Senders
		}
		if given.Users > 0 && given.Senders == 0 {
			sz.Senders = min(sz.Senders, sz.Users)
		}
		sz.Senders = max(1, min(sz.Senders, sz.Users))
		sz.Groups = sz.Senders
		sz.Members = max(1, min(sz.Members, sz.Users-1))
		if given.Sessions == 0 {
			sz.Sessions = sz.Users
		}
		sz.Sessions = max(sz.Sessions, sz.Users)
		if given.Messages > 0 && given.Duration == 0 {
			sz.Duration = 0 // --messages alone: send that many
		} else if given.Messages == 0 {
			sz.Messages = 0 // until the duration is up
		}
	},
	run: func(ctx context.Context, r *run, res *Result) error {
		p, m := r.sizes.Senders, r.sizes.Members
		return r.everyoneOnlinePlan(ctx, res, func(u int) [][]int {
			return interactiveGroups(u, p, m)
		}, func() sendPlan {
			// Sender i is session i; it created group i, the only one it
			// sends into.
			return sendPlan{senders: r.sessions[:p], pick: func(s *session, _ int) *recvState {
				return s.convs[r.groups[s.id].id]
			}}
		})
	},
}

// interactiveGroups lays out p groups of a sender and m other members over
// u users: group i is user i (its only sender) and users i+1 .. i+m (mod p)
// when u is p, else m listeners taken in turn from users p .. u-1.
func interactiveGroups(u, p, m int) [][]int {
	out := make([][]int, p)
	for i := range out {
		out[i] = append(out[i], i)
		for k := 0; k < m; k++ {
			if u <= p {
				out[i] = append(out[i], (i+1+k)%p)
			} else {
				out[i] = append(out[i], p+(i*m+k)%(u-p))
			}
		}
	}
	return out
}
