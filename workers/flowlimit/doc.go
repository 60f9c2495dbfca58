// Package flowlimit enforces flow limits shared by every worker through Redis:
// for each value of a limit's key (a tenant, a partner account), at most
// Concurrency attempts at once and at most Rate starts per Period, with a
// Burst above the even pace.
//
// A budget is two keys with one hash tag, `<prefix>idemgate:limit:{<name>:<value>}:slots`
// and `…:tat`, so Redis Cluster keeps them in one slot (a value longer than
// MaxValueBytes is named by its ShortValue, so a payload's size never
// reaches Redis):
//   - concurrency is leased slots: a sorted set of holders scored by the end
//     of their lease. A holder renews its lease while it runs (the worker
//     does it with the resource lock's renewal) and gives the slot back when
//     it ends; the slot of a holder that died frees when its lease runs out.
//   - rate is GCRA (the generic cell rate algorithm): one theoretical
//     arrival time per budget, moved one interval (Period/Rate) per start. A
//     refused start learns exactly when the next one is admitted.
//
// One Lua script checks every rule of a take and then takes them all, or
// none, in one round trip, on Redis's own clock (TIME), so workers whose
// clocks disagree share one pace. The scripts are this package's own.
//
// Starts are paced as Rate per Period and 50ms, so that a receiver
// counting per Period sees at most Rate while the starts' trip to it
// varies by less than that.
//
// The takes of one process that wait for the slots of one budget form a
// line (Watch): a slot released in that process goes to the oldest at
// once, and only the first in line looks at Redis for slots other
// processes free.
//
// Losing Redis loses the counters only: a fresh Redis starts every budget
// empty. Limits pace calls; they never decide whether an effect happens
// (fencing tokens and the execution state do that).
//
//	l := flowlimit.New(rdb, flowlimit.Options{})
//	hold, err := l.Take(ctx, flowlimit.Holder(jobID), 30*time.Second, []flowlimit.Rule{
//		{Name: "ship-api", Value: "acme", Concurrency: 8, Rate: 20, Period: time.Second, Burst: 5},
//	})
//	var refused *flowlimit.RefusedError
//	if errors.As(err, &refused) {
//		// try again after refused.RetryAfter (rate), or a little later (slots)
//	}
//	defer hold.Release(context.WithoutCancel(ctx))
package flowlimit
