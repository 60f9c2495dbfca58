package flowlimit_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/workers/flowlimit"
)

// TestReleaseHandsTheSlotToTheOldestWaiter: a release in this process
// wakes the take that has waited longest for that budget, and it alone,
// so a freed slot is taken at once instead of at the next look.
func TestReleaseHandsTheSlotToTheOldestWaiter(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "ship", Value: "acme", Concurrency: 1}
	other := flowlimit.Rule{Name: "ship", Value: "globex", Concurrency: 1}
	held := mustTake(t, l, "a", time.Minute, rule)
	otherHeld := mustTake(t, l, "x", time.Minute, other)

	first, second := l.Watch("ship", "acme"), l.Watch("ship", "acme")
	defer first.Stop()
	defer second.Stop()
	if _, err := l.Take(t.Context(), "b", time.Minute, []flowlimit.Rule{rule}); refusal(t, err).Reason != flowlimit.ReasonConcurrency {
		t.Fatalf("take of a full budget: %v, want the concurrency refusal", err)
	}

	// Freeing another budget wakes no one in this line.
	if err := otherHeld.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.C():
		t.Fatal("a release of globex's slot woke a waiter for acme's")
	default:
	}

	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the oldest waiter was not woken by the release")
	}
	select {
	case <-second.C():
		t.Fatal("one release woke two waiters")
	default:
	}
	mustTake(t, l, "b", time.Minute, rule)
}

// TestStoppedWatchLeavesTheLine: a waiter that gave up is skipped; the
// next one gets the freed slot.
func TestStoppedWatchLeavesTheLine(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "ship", Value: "initech", Concurrency: 1}
	held := mustTake(t, l, "a", time.Minute, rule)
	gone, next := l.Watch("ship", "initech"), l.Watch("ship", "initech")
	defer next.Stop()
	gone.Stop()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a stopped one was not woken")
	}
}
