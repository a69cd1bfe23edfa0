package bench

import "context"

// sendScenario measures durable sends: S senders, flat out or at --rate,
// into G groups of M members with everyone online.
var sendScenario = &scenario{
	name:     "send",
	defaults: Sizes{Users: 100, Groups: 100, Members: 10, Sessions: 100, Senders: 20, Messages: 30000},
	adjust: func(sz *Sizes, given Sizes) {
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
