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
// Fencing tokens are checked as the Store contract states them: at least 1
// on a record's first claim, strictly higher on each later one. A store that
// counts from 1 passes TokensFromOne to have the exact values checked too.
package idempotencytest
