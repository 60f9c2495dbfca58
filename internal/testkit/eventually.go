package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds and fails the test, naming what,
// when timeout passes first. The timeout only stops a broken test: it
// asserts nothing about speed, so make it generous. Call it from the
// test's goroutine, as it ends the test with t.Fatalf.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
