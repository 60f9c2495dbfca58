package workers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// serverEnv adds a real asynq server on a queue of the test's own.
type serverEnv struct {
	*env
	redisOpt  asynq.RedisConnOpt
	queue     string
	client    *asynq.Client
	inspector *asynq.Inspector
}

func newServerEnv(t testing.TB) *serverEnv {
	t.Helper()
	e := newEnv(t)
	opt, err := asynq.ParseRedisURI(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &serverEnv{
		env:       e,
		redisOpt:  opt,
		queue:     strings.ReplaceAll(strings.TrimSuffix(testkit.Prefix(), ":"), ":", "-"),
		client:    asynq.NewClient(opt),
		inspector: asynq.NewInspector(opt),
	}
	t.Cleanup(func() {
		_ = s.inspector.DeleteQueue(s.queue, true)
		_ = s.inspector.Close()
		_ = s.client.Close()
	})
	return s
}

// start runs a Server for h on the test's queue with short polling and
// retry delays, and returns a function that stops it and returns Run's
// error. The test's cleanup stops it too.
func (s *serverEnv) start(t testing.TB, h asynq.Handler, cfg Config, opts ...ServerOption) (stop func() error) {
	t.Helper()
	if cfg.Queues == nil {
		cfg.Queues = map[string]int{s.queue: 1}
	}
	if cfg.Retry.Base == 0 && cfg.Retry.Busy == 0 {
		cfg.Retry = Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, Busy: 50 * time.Millisecond}
	}
	srv, err := NewServer(s.redisOpt, cfg, h, append([]ServerOption{
		WithLogger(testkit.Logger()),
		WithAsynqConfig(func(c *asynq.Config) {
			c.TaskCheckInterval = 50 * time.Millisecond
			c.DelayedTaskCheckInterval = 100 * time.Millisecond
		})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var (
		once   sync.Once
		runErr error
	)
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

func (s *serverEnv) enqueue(t testing.TB, task *asynq.Task) *asynq.TaskInfo {
	t.Helper()
	info, err := s.client.Enqueue(task, asynq.Queue(s.queue), asynq.MaxRetry(job.MaxRetry))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func (s *serverEnv) queueInfo(t *testing.T) *asynq.QueueInfo {
	t.Helper()
	qi, err := s.inspector.GetQueueInfo(s.queue)
	if err != nil {
		t.Fatal(err)
	}
	return qi
}

func (s *serverEnv) status(t *testing.T, key string) job.Status {
	t.Helper()
	rec, err := s.store.Get(t.Context(), "", key)
	if errors.Is(err, execution.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

func TestServerDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	h := Handle(s.deps(obs, 20*time.Second), kind, orderKey, orderResource, plainEffect(s.pool, "A", &calls))
	s.start(t, h, Config{Concurrency: 10})

	const deliveries = 20
	for range deliveries { // the same job, delivered as 20 tasks
		s.enqueue(t, newTask(t, "20"))
	}
	testkit.Eventually(t, "every delivery to be acked", 60*time.Second, func() bool {
		return obs.count("finished:succeeded")+obs.count("replay") == deliveries
	})
	testkit.Eventually(t, "the queue to drain", 60*time.Second, func() bool {
		qi := s.queueInfo(t)
		return qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
	})
	if qi := s.queueInfo(t); qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("business function ran %d times, want 1", got)
	}
	if got := s.effects(t, "effect:20"); len(got) != 1 {
		t.Fatalf("effects = %+v, want one", got)
	}
	if rec := s.record(t, "effect:20"); rec.Status != job.StatusSucceeded || rec.Attempts != 1 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestServerLockContentionDoesNotDeadLetter(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	deps := s.deps(obs, 20*time.Second)
	deps.MaxAttempts = 3
	h := Handle(deps, kind, orderKey, orderResource, plainEffect(s.pool, "A", &calls))

	held := s.holdLock(t, "order:21")
	defer held.Release(context.Background())

	s.start(t, h, Config{MaxAttempts: 3})
	s.enqueue(t, newTask(t, "21"))
	// Twice as many busy deliveries as there are attempts.
	testkit.Eventually(t, "six busy deliveries", 60*time.Second, func() bool { return obs.count("attempt:lock_busy") >= 6 })
	if st := s.status(t, "effect:21"); st != "" {
		t.Fatalf("busy deliveries created execution state %q", st)
	}
	if qi := s.queueInfo(t); qi.Archived != 0 {
		t.Fatal("a busy lock dead-lettered the task")
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the job to succeed", 60*time.Second, func() bool { return s.status(t, "effect:21") == job.StatusSucceeded })
	if rec := s.record(t, "effect:21"); rec.Attempts != 1 {
		t.Fatalf("record = %+v, want 1 attempt", rec)
	}
	if qi := s.queueInfo(t); qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	if calls.Load() != 1 {
		t.Fatalf("business function ran %d times", calls.Load())
	}
}

// Through asynq: a partner down for three times as many deliveries as the
// job has attempts, then back. Nothing is archived, the job succeeds after
// one real attempt, and the backoff kept growing: asynq counted every
// unavailable delivery in the retry count it gives RetryDelay.
func TestServerUnavailableDoesNotDeadLetter(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	obs := newRecorder()
	const down = 6
	var calls atomic.Int64
	deps := s.deps(obs, 20*time.Second)
	deps.MaxAttempts = 2
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		if calls.Add(1) <= down {
			return "", Unavailable(errors.New("partner answered 503"))
		}
		return idempotentEffect(ctx, s.pool, job, "A")
	})
	// Each delay is drawn from [0, ceiling): record the ceilings and draw
	// 0, so the test waits for nothing but asynq's polling.
	var (
		mu       sync.Mutex
		ceilings []time.Duration
	)
	draw := func(n int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		ceilings = append(ceilings, time.Duration(n))
		return 0
	}
	s.start(t, h, Config{MaxAttempts: 2, Retry: Backoff{Base: time.Millisecond, Max: time.Second, Busy: 50 * time.Millisecond, Rand: draw}})
	s.enqueue(t, newTask(t, "25"))

	testkit.Eventually(t, "the job to succeed", 60*time.Second, func() bool {
		if qi := s.queueInfo(t); qi.Archived != 0 {
			t.Fatalf("the task was archived while the partner was down: %+v", s.record(t, "effect:25"))
		}
		return s.status(t, "effect:25") == job.StatusSucceeded
	})
	if rec := s.record(t, "effect:25"); rec.Attempts != 1 {
		t.Fatalf("record = %+v, want succeeded after 1 real attempt", rec)
	}
	if qi := s.queueInfo(t); qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	if got := calls.Load(); got != down+1 {
		t.Fatalf("business function ran %d times, want %d", got, down+1)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond,
		8 * time.Millisecond, 16 * time.Millisecond, 32 * time.Millisecond}
	if !slices.Equal(ceilings, want) {
		t.Fatalf("backoff ceilings = %v, want %v: the backoff must keep growing while the partner is down", ceilings, want)
	}
	if obs.count("attempt:unavailable") != down || obs.count("finished:failed") != 0 {
		t.Fatalf("observer = %v", obs.counts)
	}
}

// A task enqueued with a small asynq budget is archived by asynq when the
// budget is spent, unavailable or not: the handler records the job failed,
// saying why, rather than leaving it processing with no task left.
func TestServerUnavailableWithSpentBudget(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	deps := s.deps(nil, 20*time.Second)
	deps.MaxAttempts = 10
	h := Handle(deps, kind, orderKey, orderResource, func(context.Context, Job[order]) (string, error) {
		return "", Unavailable(errors.New("partner answered 503"))
	})
	s.start(t, h, Config{})
	if _, err := s.client.Enqueue(newTask(t, "26"), asynq.Queue(s.queue), asynq.MaxRetry(2)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the task to be archived", 60*time.Second, func() bool { return s.queueInfo(t).Archived == 1 })
	rec := s.record(t, "effect:26")
	if rec.Status != job.StatusFailed || rec.Attempts != 1 ||
		rec.LastError != "asynq retry budget spent after 1 of 10 attempts: unavailable: partner answered 503" {
		t.Fatalf("record = %+v, want failed, saying asynq's budget is spent", rec)
	}
}

func TestServerDeadLetters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		err          error
		wantAttempts int
		wantLastErr  string
	}{
		{name: "permanent error", err: Permanent(errors.New("card declined")), wantAttempts: 1, wantLastErr: "card declined"},
		{name: "transient errors until max attempts", err: errors.New("partner down"), wantAttempts: 3, wantLastErr: "attempts exhausted (3 of 3): partner down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newServerEnv(t)
			var calls atomic.Int64
			deps := s.deps(nil, 20*time.Second)
			deps.MaxAttempts = 3
			h := Handle(deps, kind, orderKey, orderResource, func(context.Context, Job[order]) (string, error) {
				calls.Add(1)
				return "", tt.err
			})
			s.start(t, h, Config{})
			info := s.enqueue(t, newTask(t, "22"))

			testkit.Eventually(t, "the task to be archived", 60*time.Second, func() bool { return s.queueInfo(t).Archived == 1 })
			rec := s.record(t, "effect:22")
			if rec.Status != job.StatusFailed || rec.Attempts != tt.wantAttempts || !strings.Contains(rec.LastError, tt.wantLastErr) {
				t.Fatalf("record = %+v, want failed after %d attempts with %q", rec, tt.wantAttempts, tt.wantLastErr)
			}
			if got := calls.Load(); got != int64(tt.wantAttempts) {
				t.Fatalf("business function ran %d times, want %d", got, tt.wantAttempts)
			}
			ti, err := s.inspector.GetTaskInfo(s.queue, info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ti.State != asynq.TaskStateArchived || !strings.Contains(ti.LastErr, tt.err.Error()) {
				t.Fatalf("archived task = %s, %q", ti.State, ti.LastErr)
			}
		})
	}
}

// TestServerRefusesTaskOfDeletedJob: a failed job's archived task, run
// again from the queue (as asynqmon's "run" does) after the job's record
// was deleted, is acked without running the business function: no
// attempt, no ledger row, the task gone from the queue.
func TestServerRefusesTaskOfDeletedJob(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	records := job.NewStore(s.pool)
	obs := newRecorder()
	var calls atomic.Int64
	deps := s.deps(obs, 20*time.Second)
	deps.Jobs = records
	h := Handle(deps, kind, orderKey, orderResource, func(context.Context, Job[order]) (string, error) {
		calls.Add(1)
		return "", Permanent(errors.New("card declined"))
	})
	s.start(t, h, Config{})
	rec, err := job.NewSubmitter(s.pool, s.client).Submit(t.Context(), job.Request{Tenant: "acme", Route: "orders", Key: "k-gone",
		Spec: orderSpec(t, s.queue), Body: []byte(`{"order_id": "gone-1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the task archived", 60*time.Second, func() bool { return s.queueInfo(t).Archived == 1 })
	if calls.Load() != 1 {
		t.Fatalf("the business function ran %d times before the job failed, want 1", calls.Load())
	}

	// The job's record goes (the retention deleted it; its archived task
	// was left behind), and someone runs the archived task again.
	if err := records.Delete(t.Context(), rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.inspector.RunTask(s.queue, rec.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the task handled", 60*time.Second, func() bool {
		qi := s.queueInfo(t)
		return qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("the business function ran %d times, want once: the task of a deleted job ran", n)
	}
	if qi := s.queueInfo(t); qi.Size != 0 {
		t.Errorf("the queue holds %d tasks (%d archived), want the task acked", qi.Size, qi.Archived)
	}
	if n := obs.count("attempt:" + ClassJobGone); n != 1 {
		t.Errorf("observer counted %d %s, want 1", n, ClassJobGone)
	}
	// The execution state, kept longer than jobs, is as the failure left
	// it, and the ledger has no row for a job that no longer exists.
	if ex := s.recordOf(t, "acme", "effect:gone-1"); ex.Status != job.StatusFailed || ex.Attempts != 1 {
		t.Errorf("execution %+v, want failed after 1 attempt", ex)
	}
	var attempts int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM job_attempts WHERE job_id = $1`, rec.ID).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 {
		t.Errorf("the refused task wrote %d ledger rows for a job that no longer exists", attempts)
	}
	if _, err := records.ByID(t.Context(), rec.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("the deleted job is back: %v", err)
	}
}

func TestServerShutdownLetsRunningJobFinish(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	started, finish := make(chan struct{}), make(chan struct{})
	h := Handle(s.deps(nil, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		close(started)
		<-finish
		return idempotentEffect(ctx, s.pool, job, "A")
	})
	stop := s.start(t, h, Config{ShutdownTimeout: time.Minute})
	s.enqueue(t, newTask(t, "23"))
	<-started

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a job was still running", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(finish)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := s.status(t, "effect:23"); st != job.StatusSucceeded {
		t.Fatalf("status after a graceful shutdown = %q, want succeeded", st)
	}
	if qi := s.queueInfo(t); qi.Pending+qi.Active+qi.Retry != 0 {
		t.Fatalf("the finished job's task was not acked: %+v", qi)
	}
}

func TestServerShutdownTimeoutCancelsJob(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	var runs atomic.Int64
	h := Handle(s.deps(nil, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		if runs.Add(1) == 1 {
			<-ctx.Done() // too slow for the shutdown
			return "", context.Cause(ctx)
		}
		return idempotentEffect(ctx, s.pool, job, "B")
	})
	stop := s.start(t, h, Config{ShutdownTimeout: 300 * time.Millisecond})
	s.enqueue(t, newTask(t, "24"))
	testkit.Eventually(t, "the job to start", 60*time.Second, func() bool { return runs.Load() == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Run has returned, so the cancelled handler has: its lock is released
	// and its task is back in the queue for the next worker.
	if n := s.rdb.Exists(t.Context(), s.lockKey("24")).Val(); n != 0 {
		t.Fatal("the cancelled job's lock outlived Run")
	}
	rec := s.record(t, "effect:24")
	if rec.Status != job.StatusProcessing || !strings.Contains(rec.LastError, "context canceled") {
		t.Fatalf("record = %+v, want processing with the cancellation recorded", rec)
	}
	if qi := s.queueInfo(t); qi.Pending != 1 {
		t.Fatalf("queue = %+v, want the task pending again", qi)
	}

	s.start(t, h, Config{})
	testkit.Eventually(t, "the next server to finish the job", 60*time.Second, func() bool { return s.status(t, "effect:24") == job.StatusSucceeded })
	if got := s.effects(t, "effect:24"); len(got) != 1 {
		t.Fatalf("effects = %+v", got)
	}
}
