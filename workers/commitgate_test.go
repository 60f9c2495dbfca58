package workers

import (
	"context"
	"sync"
	"testing"
	"time"
)

// waiters returns how many attempts wait at the gate.
func (g *commitGate) waiters() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// awaitWaiters polls until n attempts wait; the deadline only stops a
// broken test.
func awaitWaiters(t *testing.T, g *commitGate, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for g.waiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts wait at the gate, want %d", g.waiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lone attempt goes on at once: with the gate's longest wait an hour, a
// wait that returns at all did not wait for the timer.
func TestGateLetsALoneJobGo(t *testing.T) {
	g := &commitGate{maxWait: time.Hour}
	leave := g.enter()
	g.wait(t.Context())
	leave()
	if g.waiters() != 0 {
		t.Fatal("an attempt is left waiting")
	}
}

// Three attempts run; the first two to complete wait, and the third's
// completion lets all three go together.
func TestGateReleasesTheGroupWhenAllHaveCompleted(t *testing.T) {
	g := &commitGate{maxWait: time.Hour}
	leaves := []func(){g.enter(), g.enter(), g.enter()}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { g.wait(t.Context()) })
	}
	awaitWaiters(t, g, 2)
	g.wait(t.Context()) // the third: nobody else is running
	wg.Wait()
	for _, leave := range leaves {
		leave()
	}
	if g.waiters() != 0 {
		t.Fatal("attempts left waiting")
	}
}

// An attempt that returns without completing (it failed, or its effect is
// not in PostgreSQL) stops counting as one that may join: the attempt
// waiting for it goes on.
func TestGateDoesNotWaitForAnAttemptThatEnded(t *testing.T) {
	g := &commitGate{maxWait: time.Hour}
	leaveA, leaveB := g.enter(), g.enter()
	done := make(chan struct{})
	go func() { defer close(done); g.wait(t.Context()); leaveA() }()
	awaitWaiters(t, g, 1)
	leaveB() // B failed
	<-done
}

// The longest wait holds: an attempt whose siblings never complete goes
// on after it.
func TestGateWaitIsBounded(t *testing.T) {
	g := &commitGate{maxWait: time.Millisecond}
	leaveA, leaveB := g.enter(), g.enter()
	defer leaveB()
	g.wait(t.Context()) // B never completes: returns after the bound
	leaveA()
}

// A waiting attempt whose context ends goes on.
func TestGateWaitEndsWithTheContext(t *testing.T) {
	g := &commitGate{maxWait: time.Hour}
	_, leaveB := g.enter(), g.enter()
	defer leaveB()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g.wait(ctx)
}
