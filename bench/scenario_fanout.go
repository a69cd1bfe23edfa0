package bench

import "context"

// fanoutScenario measures deliveries: one big group (--members, default
// every user), everyone online, a few senders flat out.
var fanoutScenario = &scenario{
	name:     "fanout",
	defaults: Sizes{Users: 1000, Groups: 1, Members: 1000, Sessions: 1000, Senders: 2, Messages: 1000},
	adjust: func(sz *Sizes, given Sizes) {
		switch {
		case given.Users > 0 && given.Members == 0:
			sz.Members = sz.Users
		case given.Members > 0 && given.Users == 0:
			sz.Users = sz.Members
		}
		if given.Sessions == 0 {
			sz.Sessions = sz.Users
		}
		if given.Duration > 0 && given.Messages == 0 {
			sz.Messages = 0 // --duration alone: send until it is up
		}
		clampSizes(sz)
	},
	run: func(ctx context.Context, r *run, res *Result) error {
		return r.everyoneOnline(ctx, res, func(u int) [][]int {
			return stridedGroups(u, r.sizes.Groups, r.sizes.Members)
		})
	},
}
