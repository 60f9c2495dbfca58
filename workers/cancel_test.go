package workers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// cancelEnv is a test's services plus the jobs records and a cancel
// watcher that checks every 20ms, run by the test.
type cancelEnv struct {
	*env
	records *job.Store
	watcher *CancelWatcher
	tenant  string
}

func newCancelEnv(t *testing.T) *cancelEnv {
	t.Helper()
	e := &cancelEnv{env: newEnv(t), tenant: "acme"}
	e.records = job.NewStore(e.pool)
	e.watcher = NewCancelWatcher(e.records.Cancelling, 20*time.Millisecond, testkit.Logger())
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.watcher.Run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	return e
}

func (e *cancelEnv) deps() Deps {
	d := e.env.deps(NopObserver{}, 5*time.Second)
	d.Jobs = e.records
	d.Cancels = e.watcher
	return d
}

// submit records a job for order id in status as the gateway would (its
// jobs row) and returns its task.
func (e *cancelEnv) submit(t *testing.T, orderID string, status job.Status) (string, *asynq.Task) {
	t.Helper()
	return e.submitJob(t, e.tenant, orderID, status)
}

func (e *cancelEnv) job(t *testing.T, id string) job.Row {
	t.Helper()
	rec, err := e.records.ByID(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// ledger lists the outcomes and errors of the job's attempts, in order.
func (e *cancelEnv) ledger(t *testing.T, id string) []string {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT coalesce(outcome, 'open') || ' ' || coalesce(error, '') FROM job_attempts WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *cancelEnv) effectCount(t *testing.T, orderID string) int {
	t.Helper()
	return len(e.effects(t, "effect:"+orderID))
}

func (e *cancelEnv) awaitStatus(t *testing.T, id string, want job.Status) job.Row {
	t.Helper()
	var rec job.Row
	testkit.Eventually(t, "job "+id+" "+string(want), 60*time.Second, func() bool {
		rec = e.job(t, id)
		return rec.Status == want
	})
	return rec
}

// A job cancelled before any attempt answers cancelled at once, and its
// task, delivered anyway (deleting it from the queue is only a courtesy),
// does nothing: the business function never runs, the job stays
// cancelled, and the ledger says the delivery was refused.
func TestCancelBeforeAnyAttempt(t *testing.T) {
	t.Parallel()
	for _, status := range []job.Status{job.StatusScheduled, job.StatusQueued, job.StatusRetrying} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			e := newCancelEnv(t)
			var calls atomic.Int64
			h := Handle(e.deps(), kind, orderKey, orderResource, plainEffect(e.pool, "w1", &calls))
			orderID := "o-" + string(status)
			id, task := e.submit(t, orderID, status)
			if status == job.StatusRetrying {
				// A first attempt failed: the key's execution row is
				// processing between attempts.
				rec, err := e.store.Take(t.Context(), execution.Attempt{Tenant: e.tenant, Key: "effect:" + orderID, Task: kind,
					Resource: Scope(e.tenant, "order:"+orderID), JobID: id, Worker: "w0"})
				if err != nil {
					t.Fatal(err)
				}
				if err := e.store.MarkRetrying(t.Context(), e.tenant, "effect:"+orderID, rec.FencingToken, "boom"); err != nil {
					t.Fatal(err)
				}
				if err := e.records.SetStatus(t.Context(), id, job.StatusRetrying, 1, "", "the attempt failed"); err != nil {
					t.Fatal(err)
				}
			}

			got, _, err := e.records.Cancel(t.Context(), e.tenant, id)
			if err != nil || got.Status != job.StatusCancelled || got.CancelRequestedAt == nil || got.FinishedAt == nil {
				t.Fatalf("cancel of a %s job: %+v %v, want cancelled with cancel_requested_at and finished_at", status, got, err)
			}
			again, _, err := e.records.Cancel(t.Context(), e.tenant, id)
			if err != nil || again.Status != job.StatusCancelled || !again.CancelRequestedAt.Equal(*got.CancelRequestedAt) {
				t.Fatalf("second cancel: %+v %v, want cancelled, cancel_requested_at unchanged", again, err)
			}

			if err := h.ProcessTask(t.Context(), task); err != nil {
				t.Fatalf("delivery of a cancelled job: %v, want acked", err)
			}
			if calls.Load() != 0 || e.effectCount(t, orderID) != 0 {
				t.Fatalf("the business function ran %d times for a cancelled job", calls.Load())
			}
			if rec := e.job(t, id); rec.Status != job.StatusCancelled {
				t.Fatalf("job after the refused delivery: %s, want cancelled", rec.Status)
			}
			ledger := e.ledger(t, id)
			if last := ledger[len(ledger)-1]; last != "cancelled "+execution.CancelledBefore {
				t.Fatalf("ledger %q, want the refused delivery last", ledger)
			}
			if status == job.StatusRetrying {
				// The key it held between attempts is released.
				if exec, err := e.store.Get(t.Context(), e.tenant, "effect:"+orderID); err != nil || exec.Status != job.StatusCancelled {
					t.Fatalf("execution of the cancelled job: %+v %v, want cancelled", exec, err)
				}
			}
		})
	}
}

// A cancelled job releases its business key as a failed one does: a new
// job with the same key runs, from attempt 1.
func TestCancelReleasesTheBusinessKey(t *testing.T) {
	t.Parallel()
	e := newCancelEnv(t)
	var calls atomic.Int64
	h := Handle(e.deps(), kind, orderKey, orderResource, plainEffect(e.pool, "w1", &calls))
	first, _ := e.submit(t, "o-1", job.StatusRetrying)
	rec, err := e.store.Take(t.Context(), execution.Attempt{Tenant: e.tenant, Key: "effect:o-1", Task: kind,
		Resource: Scope(e.tenant, "order:o-1"), JobID: first, Worker: "w0", PayloadSHA256: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.MarkRetrying(t.Context(), e.tenant, "effect:o-1", rec.FencingToken, "boom"); err != nil {
		t.Fatal(err)
	}
	if err := e.records.SetStatus(t.Context(), first, job.StatusRetrying, 1, "", "the attempt failed"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.records.Cancel(t.Context(), e.tenant, first); err != nil || got.Status != job.StatusCancelled {
		t.Fatalf("cancel between attempts: %+v %v", got, err)
	}
	if _, _, err := e.records.Cancel(t.Context(), e.tenant, first); err != nil {
		t.Fatal(err)
	}
	exec, err := e.store.Get(t.Context(), e.tenant, "effect:o-1")
	if err != nil || exec.Status != job.StatusCancelled {
		t.Fatalf("execution after the cancel: %+v %v, want cancelled (the key released)", exec, err)
	}
	// A second job, with another payload hash under the same key, runs.
	_, task := e.submit(t, "o-1", job.StatusQueued)
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("a new job on a cancelled job's key: %v", err)
	}
	exec, _ = e.store.Get(t.Context(), e.tenant, "effect:o-1")
	if exec.Status != job.StatusSucceeded || exec.Attempts != 1 || calls.Load() != 1 {
		t.Fatalf("new job: execution %+v, calls %d, want succeeded at attempt 1", exec, calls.Load())
	}
}

// A Go handler in flight when its job is cancelled: the cancel answers
// cancelling, the handler's context is cancelled with ErrJobCancelled,
// and the job ends cancelled with no effect; the ledger says the attempt
// was stopped.
func TestCancelStopsAGoHandler(t *testing.T) {
	t.Parallel()
	e := newCancelEnv(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	h := Handle(e.deps(), kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return "", ctx.Err()
	})
	id, task := e.submit(t, "o-1", job.StatusQueued)
	done := make(chan error, 1)
	go func() { done <- h.ProcessTask(t.Context(), task) }()
	<-started
	if rec := e.job(t, id); rec.Status != job.StatusProcessing {
		t.Fatalf("job while its attempt runs: %s, want processing", rec.Status)
	}
	got, stopping, err := e.records.Cancel(t.Context(), e.tenant, id)
	if err != nil || got.Status != job.StatusCancelling || got.CancelRequestedAt == nil || !stopping {
		t.Fatalf("cancel in flight: %+v %v (stopping %v), want cancelling, an attempt stopping", got, err, stopping)
	}
	if again, stopping, err := e.records.Cancel(t.Context(), e.tenant, id); err != nil || stopping ||
		(again.Status != job.StatusCancelling && again.Status != job.StatusCancelled) {
		t.Fatalf("second cancel in flight: %+v %v (stopping %v), want the job as it is, and not a new stop", again, err, stopping)
	}
	if err := <-done; err != nil {
		t.Fatalf("attempt stopped by the cancel: %v, want acked", err)
	}
	if c := <-cause; !errors.Is(c, ErrJobCancelled) {
		t.Fatalf("the handler's context cause: %v, want ErrJobCancelled", c)
	}
	rec := e.job(t, id)
	if rec.Status != job.StatusCancelled || rec.FinishedAt == nil || rec.Error == nil || *rec.Error != reasonCancelled {
		t.Fatalf("job: %+v, want cancelled with reason %q", rec, reasonCancelled)
	}
	if ledger := e.ledger(t, id); len(ledger) != 1 || !strings.HasPrefix(ledger[0], "cancelled "+execution.CancelledStopped+": ") {
		t.Fatalf("ledger %q, want one attempt ended cancelled in flight", ledger)
	}
	if _, _, err := e.records.Cancel(t.Context(), e.tenant, id); err != nil {
		t.Fatalf("cancel of a cancelled job: %v, want it to converge", err)
	}
}

// A Go handler racing a cancel either commits its fenced write before the
// cancel (the job succeeds, one effect) or is fenced out by the cancel's
// token (the job is cancelled, no effect); a cancel before the take
// leaves nothing to run. The handler here ignores its context, as a
// careless one would: the fence alone decides.
func TestCancelRacingAGoHandler(t *testing.T) {
	t.Parallel()
	e := newCancelEnv(t)
	var calls atomic.Int64
	fenced := plainEffect(e.pool, "w1", &calls)
	h := Handle(e.deps(), kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		return fenced(context.WithoutCancel(ctx), j)
	})
	outcomes := map[job.Status]int{}
	for i := range 30 {
		orderID := fmt.Sprintf("o-%d", i)
		id, task := e.submit(t, orderID, job.StatusQueued)
		done := make(chan error, 1)
		go func() { done <- h.ProcessTask(t.Context(), task) }()
		time.Sleep(time.Duration(i%6) * 2 * time.Millisecond) // spread the cancels over the attempt
		answer, _, err := e.records.Cancel(t.Context(), e.tenant, id)
		if err != nil && !errors.Is(err, job.ErrNotCancellable) {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: attempt: %v", orderID, err)
		}
		rec, effects := e.job(t, id), e.effectCount(t, orderID)
		switch {
		case rec.Status == job.StatusSucceeded && effects == 1:
			// committed first; the cancel answered cancelling (or 409 if
			// the job had already succeeded)
			if answer.Status != job.StatusCancelling && answer.Status != job.StatusSucceeded {
				t.Fatalf("%s: cancel answered %s for a job that succeeded", orderID, answer.Status)
			}
		case rec.Status == job.StatusCancelled && effects == 0:
		default:
			t.Fatalf("%s: job %s with %d effects (cancel answered %s): want succeeded with 1 or cancelled with 0",
				orderID, rec.Status, effects, answer.Status)
		}
		outcomes[rec.Status]++
	}
	t.Logf("outcomes over 30 races: %v", outcomes)
}

// The business write of an attempt in flight is refused once the cancel
// has committed: the cancel drew the resource's next token and made it
// the newest accepted.
func TestCancelFencesOutTheAttemptInFlight(t *testing.T) {
	t.Parallel()
	e := newCancelEnv(t)
	var calls atomic.Int64
	fenced := plainEffect(e.pool, "w1", &calls)
	started, release := make(chan struct{}), make(chan struct{})
	h := Handle(e.deps(), kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		close(started)
		<-release
		return fenced(context.WithoutCancel(ctx), j)
	})
	id, task := e.submit(t, "o-1", job.StatusQueued)
	done := make(chan error, 1)
	go func() { done <- h.ProcessTask(t.Context(), task) }()
	<-started
	if got, _, err := e.records.Cancel(t.Context(), e.tenant, id); err != nil || got.Status != job.StatusCancelling {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("attempt: %v", err)
	}
	if n := e.effectCount(t, "o-1"); n != 0 || calls.Load() != 1 {
		t.Fatalf("effects after the cancel: %d (calls %d), want none: the write must be fenced out", n, calls.Load())
	}
	if rec := e.job(t, id); rec.Status != job.StatusCancelled {
		t.Fatalf("job: %s, want cancelled", rec.Status)
	}
	if ledger := e.ledger(t, id); len(ledger) != 1 || !strings.HasPrefix(ledger[0], "cancelled "+execution.CancelledFenced+": ") {
		t.Fatalf("ledger %q, want the attempt fenced out", ledger)
	}
}

// A handler that committed before the cancel succeeds: the cancel
// answered cancelling, and the attempt's success decides.
func TestCancelAfterTheEffectSucceeds(t *testing.T) {
	t.Parallel()
	e := newCancelEnv(t)
	var calls atomic.Int64
	fenced := plainEffect(e.pool, "w1", &calls)
	committed, release := make(chan struct{}), make(chan struct{})
	h := Handle(e.deps(), kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		ref, err := fenced(ctx, j)
		close(committed)
		<-release
		return ref, err
	})
	id, task := e.submit(t, "o-1", job.StatusQueued)
	done := make(chan error, 1)
	go func() { done <- h.ProcessTask(t.Context(), task) }()
	<-committed
	if got, _, err := e.records.Cancel(t.Context(), e.tenant, id); err != nil || got.Status != job.StatusCancelling {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("attempt: %v", err)
	}
	rec := e.job(t, id)
	if rec.Status != job.StatusSucceeded || e.effectCount(t, "o-1") != 1 || rec.CancelRequestedAt == nil {
		t.Fatalf("job: %+v, want succeeded with its one effect and the cancel's time kept", rec)
	}
	if _, _, err := e.records.Cancel(t.Context(), e.tenant, id); !errors.Is(err, job.ErrNotCancellable) {
		t.Fatalf("cancel of a succeeded job: %v, want ErrNotCancellable", err)
	}
}

// An HTTP delivery in flight is not aborted by a cancel: its answer
// decides. A success answer succeeds the job; a failure answer cancels
// it; no answer cancels it with "the receiver may have applied it".
func TestCancelDuringHTTPDelivery(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		answer    func(w http.ResponseWriter)
		status    job.Status
		reason    string
		ledgerHas string
	}{
		{"success answer", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, job.StatusSucceeded, "", "succeeded"},
		{"failure answer", func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) }, job.StatusCancelled,
			reasonCancelled, "cancelled " + execution.CancelledStopped + ": "},
		{"no answer", nil, job.StatusCancelled, reasonNoAnswer, "cancelled " + execution.CancelledNoAnswer + ": "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newCancelEnv(t)
			arrived, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv, _ := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				once.Do(func() { close(arrived) })
				<-release
				if tc.answer == nil {
					panic(http.ErrAbortHandler) // the connection drops: no answer
				}
				tc.answer(w)
			})
			spec := shipmentSpec(t)
			spec.HTTP = &job.HTTP{URL: srv.URL, Secrets: [][]byte{[]byte("0123456789abcdef")}, Timeout: time.Minute}
			mux, err := (*Handlers)(nil).Mux(e.deps(), []*job.Spec{spec}, HTTPDelivery{})
			if err != nil {
				t.Fatal(err)
			}
			id, _ := e.submit(t, "o-1", job.StatusQueued)
			task := asynq.NewTaskWithHeaders(kind, []byte(`{"order_id": "o-1", "quantity": 1}`),
				map[string]string{job.HeaderID: id, job.HeaderTenant: e.tenant})
			done := make(chan error, 1)
			go func() { done <- mux.ProcessTask(t.Context(), task) }()
			<-arrived
			if got, _, err := e.records.Cancel(t.Context(), e.tenant, id); err != nil || got.Status != job.StatusCancelling {
				t.Fatalf("cancel: %+v %v", got, err)
			}
			// Several watcher checks pass: the request is not aborted.
			time.Sleep(100 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("the delivery ended before the receiver answered: %v", err)
			default:
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("attempt: %v, want acked", err)
			}
			rec := e.job(t, id)
			if rec.Status != tc.status || (tc.reason != "" && (rec.Error == nil || *rec.Error != tc.reason)) {
				t.Fatalf("job: %s error %v, want %s %q", rec.Status, rec.Error, tc.status, tc.reason)
			}
			if ledger := e.ledger(t, id); len(ledger) != 1 || !strings.HasPrefix(ledger[0], tc.ledgerHas) {
				t.Fatalf("ledger %q, want %q", ledger, tc.ledgerHas)
			}
		})
	}
}

// Through a running Server: the watcher runs with it, and a task of a job
// cancelled before it ran is acked without an attempt.
func TestServerRunsTheCancelWatcher(t *testing.T) {
	t.Parallel()
	s := newServerEnv(t)
	records := job.NewStore(s.pool)
	watcher := NewCancelWatcher(records.Cancelling, 20*time.Millisecond, testkit.Logger())
	deps := s.deps(NopObserver{}, 5*time.Second)
	deps.OnStatus, deps.Cancels = records.Follow, watcher
	started := make(chan struct{}, 1)
	var calls atomic.Int64
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		calls.Add(1)
		if j.Payload.OrderID == "cancel-me" {
			started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "ok", nil
	})
	s.start(t, h, Config{}, WithCancelWatcher(watcher))
	ce := &cancelEnv{env: s.env, records: records, watcher: watcher, tenant: "acme"}

	before, beforeTask := ce.submit(t, "never", job.StatusQueued)
	if _, _, err := records.Cancel(t.Context(), ce.tenant, before); err != nil {
		t.Fatal(err)
	}
	s.enqueue(t, beforeTask) // escaped deletion
	running, runningTask := ce.submit(t, "cancel-me", job.StatusQueued)
	s.enqueue(t, runningTask)
	<-started
	if got, _, err := records.Cancel(t.Context(), ce.tenant, running); err != nil || got.Status != job.StatusCancelling {
		t.Fatalf("cancel in flight: %+v %v", got, err)
	}
	ce.awaitStatus(t, running, job.StatusCancelled)
	testkit.Eventually(t, "the cancelled job's task acked", 60*time.Second, func() bool {
		qi := s.queueInfo(t)
		return qi.Size == 0 && qi.Active == 0
	})
	if calls.Load() != 1 {
		t.Fatalf("business function calls: %d, want 1 (the cancelled-before job never runs)", calls.Load())
	}
	if rec := ce.job(t, before); rec.Status != job.StatusCancelled {
		t.Fatalf("job cancelled before its delivery: %s", rec.Status)
	}
}
