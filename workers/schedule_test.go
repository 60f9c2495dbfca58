package workers

import (
	"context"
	"errors"
	"github.com/idemgate/idemgate/internal/testkit"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// A task handed over before its job's not_before (an older gateway, the
// relay, a worker whose clock runs ahead) goes back until it is due, and
// it is neither an attempt nor a failure.
func TestNotDueIsGivenBackUntilDue(t *testing.T) {
	t.Parallel()
	now := time.Now()
	task := func(v string) *asynq.Task {
		return asynq.NewTaskWithHeaders(kind, []byte(`{"order_id":"1"}`), map[string]string{job.HeaderNotBefore: v})
	}
	for _, tc := range []struct {
		name string
		task *asynq.Task
		wait time.Duration // 0: due
	}{
		{"no header", asynq.NewTask(kind, nil), 0},
		{"ahead", task(now.Add(1500 * time.Millisecond).Format(time.RFC3339Nano)), 1500 * time.Millisecond},
		{"ahead, another offset", task(now.Add(time.Hour).In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano)), time.Hour},
		{"past", task(now.Add(-time.Second).Format(time.RFC3339Nano)), 0},
		{"now", task(now.Format(time.RFC3339Nano)), 0},
		{"unreadable", task("tomorrow"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := notDue(tc.task, now)
			if tc.wait == 0 {
				if err != nil {
					t.Fatalf("notDue = %v, want nil: the job is due", err)
				}
				return
			}
			var nd *NotDueError
			if !errors.As(err, &nd) || nd.Wait != tc.wait || !nd.NotBefore.Equal(now.Add(tc.wait)) {
				t.Fatalf("notDue = %v, want a *NotDueError waiting %s", err, tc.wait)
			}
			if IsFailure(err) {
				t.Error("IsFailure: a task not due yet must not count against the task nor as a failure")
			}
			b := Backoff{Rand: func(int64) int64 { t.Fatal("a not-due delay must not be drawn"); return 0 }}
			for _, n := range []int{0, 5, 30} {
				// asynq keeps a retry's time to the second, rounded
				// down: the task must come back at the whole second at
				// or after not_before, never before it.
				before := time.Now()
				d := b.RetryDelay(n, err, tc.task)
				if at := before.Add(d); at.Before(nd.NotBefore) || at.Sub(nd.NotBefore) > time.Second {
					t.Errorf("RetryDelay after %d failures = %s: back %s after not_before, want within [0, 1s]", n, d, at.Sub(nd.NotBefore))
				}
				if at := time.Now().Add(d).Truncate(time.Second); at.Before(nd.NotBefore.Truncate(time.Second)) {
					t.Errorf("RetryDelay = %s: asynq would hand it over at %s, before not_before %s", d, at, nd.NotBefore)
				}
			}
		})
	}
}

// Through asynq: a task enqueued at once for a job not due for two
// seconds, with a budget of one attempt. The early deliveries are given
// back without an attempt, a ledger row or an observed failure; the one
// run starts at not_before or later, as the job's first attempt.
func TestServerEarlyTaskWaitsForItsTime(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	obs := newRecorder()
	deps := s.deps(obs, 20*time.Second)
	deps.MaxAttempts = 1
	var (
		mu       sync.Mutex
		started  []time.Time
		attempts []int
	)
	inner := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		mu.Lock()
		started = append(started, time.Now())
		attempts = append(attempts, j.Attempt)
		mu.Unlock()
		return idempotentEffect(ctx, s.pool, j, "A")
	})
	var deliveries atomic.Int64
	h := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		deliveries.Add(1)
		return inner.ProcessTask(ctx, task)
	})
	s.start(t, h, Config{MaxAttempts: 1})

	notBefore := time.Now().Add(2 * time.Second)
	task := asynq.NewTaskWithHeaders(kind, []byte(`{"order_id":"early-1"}`), map[string]string{
		job.HeaderID: "job_early", job.HeaderNotBefore: notBefore.UTC().Format(time.RFC3339Nano)})
	s.enqueue(t, task)
	testkit.Eventually(t, "the job to succeed", 60*time.Second, func() bool { return s.status(t, "effect:early-1") == job.StatusSucceeded })

	mu.Lock()
	defer mu.Unlock()
	if len(started) != 1 || attempts[0] != 1 {
		t.Fatalf("the business function ran %d times (attempts %v), want once, as attempt 1", len(started), attempts)
	}
	if started[0].Before(notBefore) {
		t.Errorf("the job ran %s before its not_before", notBefore.Sub(started[0]))
	}
	if deliveries.Load() < 2 {
		t.Errorf("%d deliveries: the early one was not given back", deliveries.Load())
	}
	if rec := s.record(t, "effect:early-1"); rec.Attempts != 1 {
		t.Errorf("execution record %+v, want 1 attempt: an early delivery was counted", rec)
	}
	var ledger int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM job_attempts WHERE key = 'effect:early-1'`).Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if ledger != 1 {
		t.Errorf("the ledger holds %d attempts, want the one that ran", ledger)
	}
	for _, class := range ErrorClasses() {
		if n := obs.count("attempt:" + class); n != 0 {
			t.Errorf("observer counted %d %s attempts: an early delivery was observed as an attempt", n, class)
		}
	}
	if n := obs.count("finished:succeeded"); n != 1 {
		t.Errorf("observer counted %d successes, want 1", n)
	}
	if qi := s.queueInfo(t); qi.Archived != 0 {
		t.Errorf("%d tasks archived", qi.Archived)
	}
}
