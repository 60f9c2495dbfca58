package workers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// A dependency that stays down for more deliveries than the job has
// attempts delays the job and never fails it: each unavailable attempt is
// recorded and given back.
func TestUnavailableIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var st statuses
	deps := e.deps(obs, 20*time.Second)
	deps.OnStatus = st.fn
	const down = 5
	var (
		calls    atomic.Int64
		attempts []int // Job.Attempt of each call
	)
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		attempts = append(attempts, job.Attempt)
		if calls.Add(1) <= down {
			return "", Unavailable(errors.New("partner answered 503"))
		}
		return idempotentEffect(ctx, e.pool, job, "A")
	}, WithMaxAttempts(2))
	task := newTask(t, "10")

	for i := 1; i <= down; i++ {
		err := h.ProcessTask(t.Context(), task)
		if err == nil || errors.Is(err, asynq.SkipRetry) || !IsUnavailable(err) || !IsFailure(err) {
			t.Fatalf("delivery %d while the partner is down: %v, want an unavailable error asynq retries with backoff", i, err)
		}
		rec := e.record(t, "effect:10")
		if rec.Status != job.StatusProcessing || rec.Attempts != 0 || rec.LastError != "unavailable: partner answered 503" {
			t.Fatalf("delivery %d: record = %+v, want processing, 0 attempts, the error recorded", i, rec)
		}
	}
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("delivery once the partner is back: %v", err)
	}
	rec := e.record(t, "effect:10")
	if rec.Status != job.StatusSucceeded || rec.Attempts != 1 || rec.LastError != "" {
		t.Fatalf("record = %+v, want succeeded after 1 real attempt", rec)
	}
	if got := e.effects(t, "effect:10"); len(got) != 1 {
		t.Fatalf("effects = %+v, want one", got)
	}
	if want := []int{1, 1, 1, 1, 1, 1}; !slices.Equal(attempts, want) {
		t.Fatalf("Job.Attempt of each call = %v, want %v", attempts, want)
	}
	for _, s := range st.list() {
		if strings.Contains(s, " failed ") {
			t.Fatalf("statuses = %q: the job was reported failed", st.list())
		}
	}
	if got, want := st.list()[1], "effect:10 retrying #0 "; got != want {
		t.Fatalf("status after the first unavailable attempt = %q, want %q", got, want)
	}
	if obs.count("attempt:unavailable") != down || obs.count("attempt:transient") != 0 ||
		obs.count("finished:failed") != 0 || obs.count("finished:succeeded") != 1 {
		t.Fatalf("observer = %v", obs.counts)
	}
}

// Unavailable attempts between real failures do not count, and do not
// reset the count either: the job dead-letters after MaxAttempts real
// failures.
func TestUnavailableBetweenFailuresStillDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	// f: a real failure; u: the partner is unavailable.
	const script = "fuuuufuuuuf"
	var (
		calls    atomic.Int64
		attempts []int
	)
	h := Handle(e.deps(obs, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		attempts = append(attempts, job.Attempt)
		if script[calls.Add(1)-1] == 'u' {
			return "", Unavailable(errors.New("partner answered 503"))
		}
		return "", errors.New("partner answered 500")
	}, WithMaxAttempts(3))
	task := newTask(t, "11")

	failures := 0
	for i, c := range script {
		err := h.ProcessTask(t.Context(), task)
		if c == 'f' {
			failures++
		}
		rec := e.record(t, "effect:11")
		if i < len(script)-1 {
			if err == nil || errors.Is(err, asynq.SkipRetry) || !IsFailure(err) {
				t.Fatalf("delivery %d (%c): %v, want a retryable failure", i+1, c, err)
			}
			if rec.Status != job.StatusProcessing || rec.Attempts != failures {
				t.Fatalf("delivery %d (%c): record = %+v, want processing after %d real attempts", i+1, c, rec, failures)
			}
			continue
		}
		if !errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("third real failure: %v, want SkipRetry (archive)", err)
		}
		if rec.Status != job.StatusFailed || rec.Attempts != 3 ||
			rec.LastError != "attempts exhausted (3 of 3): partner answered 500" {
			t.Fatalf("after the third real failure: record = %+v", rec)
		}
	}
	if want := []int{1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3}; !slices.Equal(attempts, want) {
		t.Fatalf("Job.Attempt of each call = %v, want %v", attempts, want)
	}
	if obs.count("attempt:transient") != 3 || obs.count("attempt:unavailable") != 8 || obs.count("finished:failed") != 1 {
		t.Fatalf("observer = %v", obs.counts)
	}
}

// Permanent wins over Unavailable: the job fails at once.
func TestPermanentUnavailableFailsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := Handle(e.deps(nil, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		return "", Permanent(Unavailable(errors.New("partner endpoint retired")))
	}, WithMaxAttempts(5))
	if err := h.ProcessTask(t.Context(), newTask(t, "12")); !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("ProcessTask = %v, want SkipRetry (archive)", err)
	}
	if rec := e.record(t, "effect:12"); rec.Status != job.StatusFailed || rec.Attempts != 1 {
		t.Fatalf("record = %+v, want failed after 1 attempt", rec)
	}
}
