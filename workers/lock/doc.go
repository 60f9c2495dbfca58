// Package lock is a Redis lock that limits work on one business resource to
// one owner at a time. A lock is the key `<prefix>lock:{<resource>}`, taken
// with `SET NX PX` and a random owner token; it is renewed and released only
// by Lua scripts that compare the token first (compare-and-pexpire,
// compare-and-delete), so an owner never extends or deletes a lock that has
// passed to someone else. The braces are a Redis Cluster hash tag.
//
// A Lease renews itself every TTL/3 from a goroutine it owns. Its Context is
// cancelled the moment a renewal fails, finds the key missing or owned by
// someone else, or has not succeeded within one TTL: work running under the
// lease must stop writing then. Release stops the goroutine and deletes the
// key if it is still ours; for a lease already lost it does nothing.
//
// The commands of one Locker's concurrent callers share round trips: one
// is on the wire at a time, and those that arrive meanwhile go together in
// the next pipeline (pipeline.go), so a busy worker pays far less than two
// round trips a job for its locks and a lone job pays nothing more.
//
// A lock limits concurrency; it is not a proof of ownership. A process can
// pause past its TTL and wake up still believing it holds the lock, so
// writes that must not come from a stale owner are also fenced (see package
// fence).
//
//	locker, err := lock.New(rdb, lock.Options{TTL: 30 * time.Second})
//	if err != nil {
//		return err // an invalid option
//	}
//	lease, err := locker.Acquire(ctx, "order:42")
//	if errors.Is(err, lock.ErrBusy) {
//		// someone else is working on order 42: try later
//	}
//	defer lease.Release(context.WithoutCancel(ctx))
//	err = work(lease.Context())
package lock
