package workers

import (
	"context"
	"errors"
	"github.com/idemgate/idemgate/internal/testkit"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestHandleRunsTheEffectOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var st statuses
	var calls atomic.Int64
	deps := e.deps(obs, 20*time.Second)
	deps.OnStatus = st.fn
	h := Handle(deps, kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	task := newTask(t, "1")

	for i := range 3 {
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("business function ran %d times, want 1", got)
	}
	effects := e.effects(t, "effect:1")
	if len(effects) != 1 {
		t.Fatalf("effects = %+v, want one", effects)
	}
	rec := e.record(t, "effect:1")
	if rec.Status != job.StatusSucceeded || rec.Attempts != 1 || rec.ResultRef == "" || rec.Task != kind {
		t.Fatalf("record = %+v", rec)
	}
	if rec.FencingToken != effects[0].Token {
		t.Fatalf("record token %d, effect written with %d", rec.FencingToken, effects[0].Token)
	}
	want := []string{
		"effect:1 processing #1 ",
		"effect:1 succeeded #1 " + rec.ResultRef,
		"effect:1 succeeded #1 " + rec.ResultRef, // the replays keep a job record current
		"effect:1 succeeded #1 " + rec.ResultRef,
	}
	if got := st.list(); !slices.Equal(got, want) {
		t.Fatalf("statuses = %q, want %q", got, want)
	}
	// The duplicates take the free lock too: Take, under it, answers them.
	if obs.count("replay") != 2 || obs.count("finished:succeeded") != 1 || obs.count("lock:acquired") != 3 {
		t.Fatalf("observer = %v", obs.counts)
	}
	if n := e.rdb.Exists(t.Context(), e.lockKey("1")).Val(); n != 0 {
		t.Fatal("lock still held after the job finished")
	}
}

func TestDuplicateDeliveriesConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	h := Handle(e.deps(obs, 20*time.Second), kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	task := newTask(t, "2")

	const deliveries = 20
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range deliveries {
		wg.Go(func() {
			<-start
			deliverUntilDone(t, h, task)
		})
	}
	close(start)
	wg.Wait()
	for range 5 { // and again, one after another, after the success
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatalf("sequential duplicate: %v", err)
		}
	}

	if got := calls.Load(); got != 1 {
		t.Fatalf("business function ran %d times, want 1", got)
	}
	if got := e.effects(t, "effect:2"); len(got) != 1 {
		t.Fatalf("effects = %+v, want one", got)
	}
	rec := e.record(t, "effect:2")
	if rec.Status != job.StatusSucceeded || rec.Attempts != 1 {
		t.Fatalf("record = %+v, want succeeded after 1 attempt", rec)
	}
	if got := obs.count("replay"); got != deliveries+5-1 {
		t.Fatalf("replays = %d, want %d", got, deliveries+5-1)
	}
}

func TestLockBusyIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	h := Handle(e.deps(obs, 20*time.Second), kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls), WithMaxAttempts(1))
	task := newTask(t, "3")

	held := e.holdLock(t, "order:3")
	for range 3 {
		err := h.ProcessTask(t.Context(), task)
		var busy *LockBusyError
		if !errors.As(err, &busy) || !errors.Is(err, lock.ErrBusy) {
			t.Fatalf("delivery while the resource is locked: %v, want *LockBusyError", err)
		}
		if busy.Resource != "order:3" || busy.Key != "effect:3" {
			t.Fatalf("LockBusyError = %+v", busy)
		}
		if IsFailure(err) {
			t.Fatal("IsFailure(busy) = true: asynq would count it against the task")
		}
	}
	if _, err := e.store.Get(t.Context(), "", "effect:3"); !errors.Is(err, execution.ErrNotFound) {
		t.Fatalf("a busy lock left execution state behind: %v", err)
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// With max attempts 1, three busy deliveries still leave the one attempt.
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("delivery after the lock was freed: %v", err)
	}
	if rec := e.record(t, "effect:3"); rec.Status != job.StatusSucceeded || rec.Attempts != 1 {
		t.Fatalf("record = %+v", rec)
	}
	if calls.Load() != 1 || obs.count("attempt:lock_busy") != 3 || obs.count("lock:busy") != 3 {
		t.Fatalf("calls %d, observer %v", calls.Load(), obs.counts)
	}
}

// TestReplayWhileTheResourceIsLocked: the state read goes out with the
// lock's SET NX, but a job that has succeeded is still answered from the
// state: acked as a replay while another worker holds its resource, whose
// lock stays that worker's.
func TestReplayWhileTheResourceIsLocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	h := Handle(e.deps(obs, 20*time.Second), kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	task := newTask(t, "31")
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	held := e.holdLock(t, "order:31")
	t.Cleanup(func() { _ = held.Release(context.WithoutCancel(t.Context())) })
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("replay while the resource is locked: %v, want an ack", err)
	}
	if calls.Load() != 1 || obs.count("replay") != 1 || obs.count("lock:busy") != 0 || obs.count("attempt:lock_busy") != 0 {
		t.Fatalf("calls %d, observer %v", calls.Load(), obs.counts)
	}
	if held.Err() != nil || e.rdb.Exists(t.Context(), e.lockKey("31")).Val() != 1 {
		t.Fatalf("the other worker's lock was touched: %v", held.Err())
	}
}

func TestPermanentErrorFailsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var st statuses
	deps := e.deps(obs, 20*time.Second)
	deps.OnStatus = st.fn
	var declined atomic.Bool
	declined.Store(true)
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		if declined.Load() {
			return "", Permanent(errors.New("card declined"))
		}
		return "paid", nil
	})
	task := newTask(t, "4")

	err := h.ProcessTask(t.Context(), task)
	if !errors.Is(err, asynq.SkipRetry) || !IsPermanent(err) {
		t.Fatalf("permanent failure returned %v, want SkipRetry (archive)", err)
	}
	rec := e.record(t, "effect:4")
	if rec.Status != job.StatusFailed || rec.LastError != "permanent: card declined" || rec.Attempts != 1 {
		t.Fatalf("record = %+v", rec)
	}
	if obs.count("attempt:permanent") != 1 || obs.count("finished:failed") != 1 {
		t.Fatalf("observer = %v", obs.counts)
	}
	if got := st.list(); len(got) != 2 || got[1] != "effect:4 failed #1 " {
		t.Fatalf("statuses = %q", got)
	}

	// A replay from the dead-letter queue runs it again, with a fresh count.
	declined.Store(false)
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("replay from the DLQ: %v", err)
	}
	if rec := e.record(t, "effect:4"); rec.Status != job.StatusSucceeded || rec.Attempts != 1 || rec.ResultRef != "paid" {
		t.Fatalf("record after the replay = %+v", rec)
	}
}

func TestTransientErrorsDeadLetterAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := newRecorder()
	var calls atomic.Int64
	h := Handle(e.deps(obs, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		if got := calls.Add(1); int(got) != job.Attempt {
			return "", Permanent(errors.New("attempt numbers out of step"))
		}
		return "", errors.New("partner unavailable")
	}, WithMaxAttempts(3))
	task := newTask(t, "5")

	for attempt := 1; attempt <= 3; attempt++ {
		err := h.ProcessTask(t.Context(), task)
		rec := e.record(t, "effect:5")
		if attempt < 3 {
			if err == nil || errors.Is(err, asynq.SkipRetry) || !IsFailure(err) {
				t.Fatalf("attempt %d: %v, want a retryable failure", attempt, err)
			}
			if rec.Status != job.StatusProcessing || rec.Attempts != attempt || rec.LastError != "partner unavailable" {
				t.Fatalf("attempt %d: record = %+v", attempt, rec)
			}
			continue
		}
		if !errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("last attempt: %v, want SkipRetry (archive)", err)
		}
		if rec.Status != job.StatusFailed || rec.Attempts != 3 {
			t.Fatalf("after the last attempt: record = %+v", rec)
		}
	}
	if calls.Load() != 3 || obs.count("attempt:transient") != 3 || obs.count("finished:failed") != 1 {
		t.Fatalf("calls %d, observer %v", calls.Load(), obs.counts)
	}
}

func TestUnprocessableTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int64
	h := Handle(e.deps(nil, 20*time.Second), kind, orderKey, orderResource, plainEffect(e.pool, "A", &calls))
	tests := []struct {
		name    string
		payload string
	}{
		{name: "not JSON", payload: "{"},
		{name: "wrong type", payload: `{"order_id": 7}`},
		{name: "no key", payload: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.ProcessTask(t.Context(), asynq.NewTask(kind, []byte(tt.payload)))
			if !errors.Is(err, asynq.SkipRetry) || !IsPermanent(err) {
				t.Fatalf("ProcessTask(%s) = %v, want a permanent error that archives", tt.payload, err)
			}
		})
	}
	if calls.Load() != 0 {
		t.Fatal("the business function ran for an unprocessable task")
	}
}

// TestCrash covers the seed's crash points: a worker dies (no more writes,
// its lease abandoned without renewal or release) and the task is
// delivered again, to another worker.
func TestCrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stage string
		// wantBusy: the second worker first finds the dead worker's lock.
		wantBusy bool
		// second's business function runs again, and the effect stays A's
		// (it happened before the crash) or becomes B's.
		wantSecondCalls int64
		wantEffectBy    string
		wantAttempts    int
	}{
		{name: "after taking the job, before the effect", stage: stageTaken,
			wantBusy: true, wantSecondCalls: 1, wantEffectBy: "B", wantAttempts: 2},
		{name: "after the effect, before marking succeeded", stage: stageEffect,
			wantBusy: true, wantSecondCalls: 1, wantEffectBy: "A", wantAttempts: 2},
		{name: "after marking succeeded, before the ack", stage: stageSucceeded,
			wantBusy: false, wantSecondCalls: 0, wantEffectBy: "A", wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const ttl = 3 * time.Second
			var firstCalls, secondCalls atomic.Int64
			deadDeps := e.deps(nil, ttl)
			first := Handle(deadDeps, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
				firstCalls.Add(1)
				return idempotentEffect(ctx, e.pool, job, "A")
			}, crashAt(tt.stage))
			obs := newRecorder()
			second := Handle(e.deps(obs, ttl), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
				secondCalls.Add(1)
				return idempotentEffect(ctx, e.pool, job, "B")
			})
			task := newTask(t, "6")

			if err := first.ProcessTask(t.Context(), task); !errors.Is(err, errCrashed) {
				t.Fatalf("first worker: %v, want it to die", err)
			}
			if e.rdb.Exists(t.Context(), e.lockKey("6")).Val() != 1 {
				t.Fatal("the dead worker's lock is gone at once: it was released, not abandoned")
			}
			err := second.ProcessTask(t.Context(), task)
			var busy *LockBusyError
			if got := errors.As(err, &busy); got != tt.wantBusy {
				t.Fatalf("second delivery right after the crash: %v, want busy %v", err, tt.wantBusy)
			}
			if tt.wantBusy {
				deliverUntilDone(t, second, task) // once the dead worker's lock expires
			} else if err != nil {
				t.Fatalf("second delivery: %v", err)
			}

			effects := e.effects(t, "effect:6")
			if len(effects) != 1 || effects[0].Worker != tt.wantEffectBy {
				t.Fatalf("effects = %+v, want exactly one, by %s", effects, tt.wantEffectBy)
			}
			if got := secondCalls.Load(); got != tt.wantSecondCalls {
				t.Fatalf("second worker's business function ran %d times, want %d", got, tt.wantSecondCalls)
			}
			rec := e.record(t, "effect:6")
			if rec.Status != job.StatusSucceeded || rec.Attempts != tt.wantAttempts {
				t.Fatalf("record = %+v, want succeeded after %d attempts", rec, tt.wantAttempts)
			}
			// Later duplicates are replays.
			if err := second.ProcessTask(t.Context(), task); err != nil {
				t.Fatal(err)
			}
			if got := e.effects(t, "effect:6"); len(got) != 1 {
				t.Fatalf("effects after a later duplicate = %+v", got)
			}
		})
	}
}

// pausable returns lock options whose renewals block, once paused, until
// resumed or the lease ends: a process frozen by a GC pause or a stalled
// VM. Renewals really stop, so Redis lets the key expire.
func pausable(o lock.Options, paused <-chan struct{}, resume <-chan struct{}) lock.Options {
	o.BeforeRenew = func(ctx context.Context, _ string) {
		select {
		case <-paused:
		default:
			return
		}
		select {
		case <-resume:
		case <-ctx.Done():
		}
	}
	return o
}

// TestCrashWhileLockExpires: worker A is in the middle of its effect
// transaction, its renewals stalled, when its lock expires; B takes the job
// with a newer token and waits on the fence A's transaction holds; A dies
// (its transaction is rolled back); B applies the effect, once.
func TestCrashWhileLockExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 3 * time.Second
	paused, resume := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(resume) })
	inFlight, kill := make(chan int64, 1), make(chan struct{})

	depsA := e.deps(nil, ttl)
	depsA.Lock = pausable(depsA.Lock, paused, resume)
	a := Handle(depsA, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		tx, err := e.pool.Begin(context.WithoutCancel(ctx))
		if err != nil {
			return "", err
		}
		defer tx.Rollback(context.Background()) // the connection dies with the process
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return "", err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, 'A')`,
			job.Key, job.Resource, job.Token); err != nil {
			return "", err
		}
		close(paused) // renewals stall from here: the lock is about to expire
		inFlight <- job.Token
		<-kill
		return "", errors.New("killed")
	}, crashAt(stageEffect))
	b := Handle(e.deps(nil, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		return idempotentEffect(ctx, e.pool, job, "B")
	})
	task := newTask(t, "7")

	aDone := make(chan error, 1)
	go func() { aDone <- a.ProcessTask(t.Context(), task) }()
	tokenA := <-inFlight
	testkit.Eventually(t, "A's lock to expire", 60*time.Second, func() bool { return e.rdb.Exists(t.Context(), e.lockKey("7")).Val() == 0 })

	bDone := make(chan error, 1)
	go func() {
		var err error
		for {
			err = b.ProcessTask(t.Context(), task)
			if err == nil || IsFailure(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		bDone <- err
	}()
	testkit.Eventually(t, "B to take the job", 60*time.Second, func() bool {
		rec, err := e.store.Get(t.Context(), "", "effect:7")
		return err == nil && rec.FencingToken > tokenA
	})
	close(kill)
	if err := <-aDone; !errors.Is(err, errCrashed) {
		t.Fatalf("A: %v, want it to die", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}

	effects := e.effects(t, "effect:7")
	if len(effects) != 1 || effects[0].Worker != "B" || effects[0].Token <= tokenA {
		t.Fatalf("effects = %+v, want exactly one, B's, with a token above A's %d", effects, tokenA)
	}
	if rec := e.record(t, "effect:7"); rec.Status != job.StatusSucceeded || rec.Attempts != 2 {
		t.Fatalf("record = %+v", rec)
	}
}

// TestPausedOwnerIsFenced is the seed's pause scenario: A holds the lock
// and its renewals are really paused past the TTL; B takes over with a
// higher token and writes; A resumes and writes, unaware (its write does
// not even watch its cancelled context), and is refused as stale. The row
// ends as B wrote it.
func TestPausedOwnerIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.pool.Exec(t.Context(), `
CREATE TABLE balances (resource text PRIMARY KEY, owner text NOT NULL, fencing_token bigint NOT NULL);
INSERT INTO balances VALUES ('order:8', 'nobody', 0)`); err != nil {
		t.Fatal(err)
	}
	// write is a business write fenced by its own WHERE clause.
	write := func(ctx context.Context, job Job[order], owner string) (string, error) {
		tag, err := e.pool.Exec(ctx, `
UPDATE balances SET owner = $1, fencing_token = $2
 WHERE resource = $3 AND fencing_token < $2`, owner, job.Token, job.Resource)
		if err != nil {
			return "", err
		}
		return owner, fence.Expect(tag, job.Resource, job.Token)
	}

	const ttl = 3 * time.Second
	paused, resume := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(resume) })
	started, goA := make(chan int64, 1), make(chan struct{})
	obsA := newRecorder()
	depsA := e.deps(obsA, ttl)
	depsA.Lock = pausable(depsA.Lock, paused, resume)
	a := Handle(depsA, kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		close(paused) // the process freezes from here on
		started <- job.Token
		<-goA
		return write(context.WithoutCancel(ctx), job, "A")
	})
	b := Handle(e.deps(nil, 20*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		return write(ctx, job, "B")
	})
	task := newTask(t, "8")

	aDone := make(chan error, 1)
	go func() { aDone <- a.ProcessTask(t.Context(), task) }()
	tokenA := <-started
	testkit.Eventually(t, "A's lock to expire", 60*time.Second, func() bool { return e.rdb.Exists(t.Context(), e.lockKey("8")).Val() == 0 })
	deliverUntilDone(t, b, task)
	close(goA)

	errA := <-aDone
	var lost *OwnershipLostError
	if !errors.As(errA, &lost) || !errors.Is(errA, fence.ErrStaleToken) || lost.Token != tokenA {
		t.Fatalf("A after resuming: %v, want *OwnershipLostError wrapping a stale token", errA)
	}
	if IsFailure(errA) {
		t.Fatal("a stale owner counts as a failure of the job")
	}

	var owner string
	var token int64
	if err := e.pool.QueryRow(t.Context(), `SELECT owner, fencing_token FROM balances WHERE resource = 'order:8'`).Scan(&owner, &token); err != nil {
		t.Fatal(err)
	}
	if owner != "B" || token <= tokenA {
		t.Fatalf("row = %s/%d, want B's write with a token above A's %d", owner, token, tokenA)
	}
	if rec := e.record(t, "effect:8"); rec.Status != job.StatusSucceeded || rec.ResultRef != "B" {
		t.Fatalf("record = %+v, want B's success", rec)
	}
	if obsA.count("fencing:rejected") != 1 || obsA.count("attempt:stale_token") != 1 || obsA.count("lock:lost") != 1 {
		t.Fatalf("A's observer = %v", obsA.counts)
	}
	// A's retry is now a replay.
	if err := a.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("A's retry: %v", err)
	}
}

// TestLostLeaseCancelsTheJob: a running job whose lock is taken away sees
// its context cancelled and stops; the attempt ends as lost ownership.
func TestLostLeaseCancelsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{})
	h := Handle(e.deps(nil, 3*time.Second), kind, orderKey, orderResource, func(ctx context.Context, job Job[order]) (string, error) {
		close(started)
		<-ctx.Done()
		return "", context.Cause(ctx)
	})
	done := make(chan error, 1)
	go func() { done <- h.ProcessTask(t.Context(), newTask(t, "9")) }()
	<-started
	if err := e.rdb.Del(t.Context(), e.lockKey("9")).Err(); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the job kept running after losing its lock")
	}
	var lost *OwnershipLostError
	if !errors.As(err, &lost) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("ProcessTask = %v, want *OwnershipLostError wrapping lock.ErrLost", err)
	}
	if rec := e.record(t, "effect:9"); rec.Status != job.StatusProcessing {
		t.Fatalf("record = %+v: a lost attempt must not decide the job", rec)
	}
}

func TestHandlePanicsOnMissingDeps(t *testing.T) {
	t.Parallel()
	fn := func(context.Context, Job[order]) (string, error) { return "", nil }
	tests := []struct {
		name string
		deps Deps
		kind string
	}{
		{name: "no DB", deps: Deps{Redis: fakeRedis{}}, kind: kind},
		{name: "no Redis", deps: Deps{DB: fakeDB{}}, kind: kind},
		{name: "no kind", deps: Deps{DB: fakeDB{}, Redis: fakeRedis{}}},
		{name: "bad lock options", deps: Deps{DB: fakeDB{}, Redis: fakeRedis{}, Lock: lock.Options{TTL: time.Millisecond}}, kind: kind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Fatal("Handle did not panic")
				}
			}()
			Handle(tt.deps, tt.kind, orderKey, orderResource, fn)
		})
	}
}

type fakeDB struct{ DB }
type fakeRedis struct{ lock.Client }
