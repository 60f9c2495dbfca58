package workers

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestServerReleasesTheLockAfterTheAck: under a Server, a succeeded job's
// lock is released after the handler returns, on a goroutine Run waits
// for: once Run has returned, no lock is left behind, and the next job on
// the resource did not wait for the lock's TTL.
func TestServerReleasesTheLockAfterTheAck(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	shared := func(order) string { return "order:shared" }
	h := Handle(s.deps(obs, time.Minute), kind, orderKey, shared, plainEffect(s.pool, "A", &calls))
	stop := s.start(t, h, Config{Concurrency: 4})

	s.enqueue(t, newTask(t, "r1"))
	waitFor(t, "the first job to succeed", func() bool { return obs.count("finished:succeeded") == 1 })
	// Another job on the same resource: it runs once the first lock is
	// gone, well before the lock's one-minute TTL.
	s.enqueue(t, newTask(t, "r2"))
	waitFor(t, "the second job on the resource to succeed", func() bool { return obs.count("finished:succeeded") == 2 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n, err := s.rdb.Exists(t.Context(), s.lockKey("shared")).Result(); err != nil || n != 0 {
		t.Fatalf("lock left after Run returned: exists=%d %v", n, err)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("business function ran %d times, want 2", got)
	}
}

// TestHandlerWithoutServerReleasesBeforeReturning: a handler called
// outside a Server (an asynq server of the caller's) has nobody to own a
// late release, so the lock is gone when ProcessTask returns.
func TestHandlerWithoutServerReleasesBeforeReturning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int64
	h := Handle(e.deps(nil, time.Minute), kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	if err := h.ProcessTask(t.Context(), newTask(t, "r3")); err != nil {
		t.Fatal(err)
	}
	if n, err := e.rdb.Exists(t.Context(), e.lockKey("r3")).Result(); err != nil || n != 0 {
		t.Fatalf("lock held after ProcessTask returned: exists=%d %v", n, err)
	}
}
