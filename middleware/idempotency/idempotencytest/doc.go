// Package idempotencytest is the conformance suite every idempotency.Store
// must pass. A store's own test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		idempotencytest.Run(t, func(t *testing.T) idempotency.Store { return memstore.New() })
//	}
//
// The suite uses real time: leases and retentions are short (hundreds of
// milliseconds) and every wait polls for the expected state with a generous
// deadline, so it neither flakes on a loaded machine nor depends on the
// store's clock agreeing with the test's.
//
// Fencing tokens are checked as the Store contract states them: on a
// record's first claim, at least the store's clock in microseconds since
// 1970 (allowing an hour of skew between the store's clock and the test's)
// and below 2^53; strictly higher on each later one. The clock floor is
// what keeps a token from repeating after a store lost a record's last
// writes (a failover to a replica behind its primary).
//
// Beyond the single-call tests, CheckHistory (the History test) calls the
// store from concurrent goroutines — contended claims, renewals,
// completions, releases, unknown outcomes, stale owners, leases left to
// expire — records every call with its result, and checks the history
// against StoreModel, the record's state machine as the Store interface
// documents it, with a linearizability checker (package history). A store
// that breaks the model fails with the shortest history found that shows
// it.
//
// The optional interfaces are checked when a store implements them and
// skipped otherwise: idempotency.Watcher (Watch), idempotency.Janitor
// (Janitor) and idempotency.RequestCounter (RequestCounts: counts added in
// batches sum up, survive a take-over, and go when the record expires or
// is deleted).
package idempotencytest
