package execution_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func attempt(token int64) execution.Attempt {
	return execution.Attempt{Tenant: "acme", Key: "invoice:1", Task: "invoice.create", Resource: "order:1", Token: token}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	store := execution.New(testkit.Pool(t))
	ctx := t.Context()
	const key = "invoice:1"

	if _, err := store.Get(ctx, "acme", key); !errors.Is(err, execution.ErrNotFound) {
		t.Fatalf("Get of an unknown key: %v, want ErrNotFound", err)
	}

	// Each step runs in order against the same key.
	steps := []struct {
		name      string
		do        func() error
		wantErr   error // matched with errors.Is
		want      job.Status
		attempts  int
		token     int64
		resultRef string
		lastErr   string
	}{
		{
			name: "first attempt creates the row",
			do:   func() error { _, err := store.MarkProcessing(ctx, attempt(3)); return err },
			want: job.StatusProcessing, attempts: 1, token: 3,
		},
		{
			name: "a transient error is recorded",
			do:   func() error { return store.MarkRetrying(ctx, "acme", key, 3, "partner timeout") },
			want: job.StatusProcessing, attempts: 1, token: 3, lastErr: "partner timeout",
		},
		{
			name:    "an older token cannot take the job",
			do:      func() error { _, err := store.MarkProcessing(ctx, attempt(2)); return err },
			wantErr: fence.ErrStaleToken,
			want:    job.StatusProcessing, attempts: 1, token: 3, lastErr: "partner timeout",
		},
		{
			name: "the next attempt counts and takes over",
			do:   func() error { _, err := store.MarkProcessing(ctx, attempt(5)); return err },
			want: job.StatusProcessing, attempts: 2, token: 5, lastErr: "partner timeout",
		},
		{
			name:    "the old attempt cannot finish it",
			do:      func() error { return store.MarkSucceeded(ctx, "acme", key, 3, "stale-result") },
			wantErr: fence.ErrStaleToken,
			want:    job.StatusProcessing, attempts: 2, token: 5, lastErr: "partner timeout",
		},
		{
			name:    "the old attempt cannot fail it",
			do:      func() error { return store.MarkFailed(ctx, "acme", key, 3, "stale failure") },
			wantErr: fence.ErrStaleToken,
			want:    job.StatusProcessing, attempts: 2, token: 5, lastErr: "partner timeout",
		},
		{
			name: "the owner succeeds",
			do:   func() error { return store.MarkSucceeded(ctx, "acme", key, 5, "invoice-7") },
			want: job.StatusSucceeded, attempts: 2, token: 5, resultRef: "invoice-7",
		},
		{
			name: "succeeding again is a no-op",
			do:   func() error { return store.MarkSucceeded(ctx, "acme", key, 5, "invoice-7") },
			want: job.StatusSucceeded, attempts: 2, token: 5, resultRef: "invoice-7",
		},
		{
			name:    "a succeeded job is final",
			do:      func() error { _, err := store.MarkProcessing(ctx, attempt(9)); return err },
			wantErr: execution.ErrSucceeded,
			want:    job.StatusSucceeded, attempts: 2, token: 5, resultRef: "invoice-7",
		},
		{
			name:    "and cannot be failed",
			do:      func() error { return store.MarkFailed(ctx, "acme", key, 5, "late") },
			wantErr: execution.ErrSucceeded,
			want:    job.StatusSucceeded, attempts: 2, token: 5, resultRef: "invoice-7",
		},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			err := st.do()
			if st.wantErr == nil && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if st.wantErr != nil && !errors.Is(err, st.wantErr) {
				t.Fatalf("err = %v, want %v", err, st.wantErr)
			}
			rec, err := store.Get(ctx, "acme", key)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != st.want || rec.Attempts != st.attempts || rec.FencingToken != st.token ||
				rec.ResultRef != st.resultRef || rec.LastError != st.lastErr {
				t.Fatalf("record = %+v\nwant status %s, attempts %d, token %d, result %q, last error %q",
					rec, st.want, st.attempts, st.token, st.resultRef, st.lastErr)
			}
			if finished := !rec.FinishedAt.IsZero(); finished != (st.want != job.StatusProcessing) {
				t.Fatalf("FinishedAt = %v with status %s", rec.FinishedAt, rec.Status)
			}
			if rec.Task != "invoice.create" || rec.Resource != "order:1" {
				t.Fatalf("task/resource = %q/%q", rec.Task, rec.Resource)
			}
		})
		if !ok {
			break
		}
	}
}

func TestMarkProcessingReturnsSucceededRecord(t *testing.T) {
	t.Parallel()
	store := execution.New(testkit.Pool(t))
	if _, err := store.MarkProcessing(t.Context(), attempt(1)); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkSucceeded(t.Context(), "acme", "invoice:1", 1, "invoice-1"); err != nil {
		t.Fatal(err)
	}
	rec, err := store.MarkProcessing(t.Context(), attempt(2))
	if !errors.Is(err, execution.ErrSucceeded) {
		t.Fatalf("MarkProcessing on a succeeded job: %v", err)
	}
	if rec.ResultRef != "invoice-1" {
		t.Fatalf("returned record %+v, want the stored result", rec)
	}
}

func TestFailedJobStartsAgain(t *testing.T) {
	t.Parallel()
	store := execution.New(testkit.Pool(t))
	ctx := t.Context()
	for _, tok := range []int64{1, 2} {
		if _, err := store.MarkProcessing(ctx, attempt(tok)); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.MarkFailed(ctx, "acme", "invoice:1", 2, "card declined"); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(ctx, "acme", "invoice:1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != job.StatusFailed || rec.LastError != "card declined" || rec.FinishedAt.IsZero() {
		t.Fatalf("after MarkFailed: %+v", rec)
	}
	rec, err = store.MarkProcessing(ctx, attempt(3))
	if err != nil {
		t.Fatalf("MarkProcessing of a failed job (a replay from the DLQ): %v", err)
	}
	if rec.Status != job.StatusProcessing || rec.Attempts != 1 || rec.LastError != "" || !rec.FinishedAt.IsZero() {
		t.Fatalf("replayed failed job = %+v, want processing, attempt 1, no error", rec)
	}
}

func TestResourceChangeIsNotStale(t *testing.T) {
	t.Parallel()
	store := execution.New(testkit.Pool(t))
	if _, err := store.MarkProcessing(t.Context(), attempt(9)); err != nil {
		t.Fatal(err)
	}
	// Tokens of different resources are not comparable: a job whose resource
	// changed (a new key derivation) is not locked out by the old counter.
	moved := attempt(1)
	moved.Resource = "customer:1"
	rec, err := store.MarkProcessing(t.Context(), moved)
	if err != nil {
		t.Fatalf("MarkProcessing under a new resource: %v", err)
	}
	if rec.Resource != "customer:1" || rec.FencingToken != 1 || rec.Attempts != 2 {
		t.Fatalf("record = %+v", rec)
	}
}

func TestMarkProcessingConcurrently(t *testing.T) {
	t.Parallel()
	store := execution.New(testkit.Pool(t))
	const n = 20
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	for tok := int64(1); tok <= n; tok++ {
		wg.Go(func() {
			_, err := store.MarkProcessing(t.Context(), attempt(tok))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, fence.ErrStaleToken):
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	rec, err := store.Get(t.Context(), "acme", "invoice:1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.FencingToken != n {
		t.Fatalf("final token = %d, want the newest, %d", rec.FencingToken, n)
	}
	if rec.Attempts != won {
		t.Fatalf("attempts = %d, want one per attempt that took the job (%d)", rec.Attempts, won)
	}
}

func TestLongErrorIsClipped(t *testing.T) {
	t.Parallel()
	store := execution.New(testkit.Pool(t))
	if _, err := store.MarkProcessing(t.Context(), attempt(1)); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 5000) + "\xff"
	if err := store.MarkRetrying(t.Context(), "acme", "invoice:1", 1, long); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(t.Context(), "acme", "invoice:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.LastError) > 2100 || !utf8.ValidString(rec.LastError) || !strings.HasPrefix(rec.LastError, "éé") {
		t.Fatalf("stored error: %d bytes, valid UTF-8 %v", len(rec.LastError), utf8.ValidString(rec.LastError))
	}
}

// TestMarkUnavailableGivesTheAttemptBack: an attempt that found a
// dependency unavailable is recorded and not counted; a transient error is
// counted; only the owner can give its attempt back.
func TestMarkUnavailableGivesTheAttemptBack(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	a := execution.Attempt{Tenant: "acme", Key: "payment:1", Task: "payment.charge", Resource: "payment:1", JobID: "job_u1", JobRecorded: true}
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
		VALUES ('job_u1', 'acme', 'charges', 'k1', 'payment.charge', 'default', 'payment:1', '{}')`); err != nil {
		t.Fatal(err)
	}
	take := func() execution.State {
		t.Helper()
		rec, err := store.Take(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	check := func(step string, attempts int, lastErr string) {
		t.Helper()
		rec, err := store.Get(ctx, "acme", a.Key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != job.StatusProcessing || rec.Attempts != attempts || rec.LastError != lastErr {
			t.Fatalf("%s: record = %+v, want processing, %d attempts, last error %q", step, rec, attempts, lastErr)
		}
		// The job's document counts what its execution counts.
		var doc int
		if err := pool.QueryRow(ctx, `SELECT attempts FROM jobs WHERE id = 'job_u1'`).Scan(&doc); err != nil || doc != attempts {
			t.Fatalf("%s: the job document shows %d attempts (%v), its execution %d", step, doc, err, attempts)
		}
	}

	first := take()
	if err := store.MarkUnavailable(ctx, "acme", a.Key, first.FencingToken, "partner answered 503"); err != nil {
		t.Fatal(err)
	}
	check("unavailable on the first attempt", 0, "partner answered 503")
	second := take()
	if second.Attempts != 1 {
		t.Fatalf("the attempt after an unavailable one: %+v, want attempt 1", second)
	}
	if err := store.MarkRetrying(ctx, "acme", a.Key, second.FencingToken, "partner answered 500"); err != nil {
		t.Fatal(err)
	}
	check("a transient error", 1, "partner answered 500")
	third := take()
	if err := store.MarkUnavailable(ctx, "acme", a.Key, third.FencingToken, "partner timeout"); err != nil {
		t.Fatal(err)
	}
	check("unavailable after a real attempt", 1, "partner timeout")

	fourth := take()
	if err := store.MarkUnavailable(ctx, "acme", a.Key, third.FencingToken, "late"); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("a superseded attempt gave its attempt back: %v, want a stale token", err)
	}
	check("after the stale give-back", 2, "partner timeout")
	if err := store.MarkSucceeded(ctx, "acme", a.Key, fourth.FencingToken, "ch_1"); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnavailable(ctx, "acme", a.Key, fourth.FencingToken, "late"); !errors.Is(err, execution.ErrSucceeded) {
		t.Fatalf("MarkUnavailable of a succeeded job: %v, want ErrSucceeded", err)
	}
}

// TestTakeDrawsTheTokenAndMarksProcessing: Take counts the attempt under a
// token drawn from the resource's fence, the same counter fence.Next uses,
// and refuses a job that has succeeded.
func TestTakeDrawsTheTokenAndMarksProcessing(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	a := execution.Attempt{Tenant: "acme", Key: "invoice:7", Task: "invoice.create", Resource: "order:7"}

	first, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if floor := time.Now().Add(-time.Hour).UnixMicro(); first.Status != job.StatusProcessing || first.Attempts != 1 || first.FencingToken < floor {
		t.Fatalf("first Take: %+v, want processing, attempt 1, a token floored by the database clock (at least %d)", first, floor)
	}
	// Another job on the same resource draws from the same counter.
	other, err := store.Take(ctx, execution.Attempt{Tenant: "acme", Key: "invoice:8", Task: "invoice.create", Resource: "order:7"})
	if err != nil || other.FencingToken <= first.FencingToken {
		t.Fatalf("Take of another job on the resource: %+v %v, want a token above %d", other, err, first.FencingToken)
	}
	drawn, err := fence.Next(ctx, pool, "order:7")
	if err != nil || drawn <= other.FencingToken {
		t.Fatalf("fence.Next after two Takes: %d %v, want above %d", drawn, err, other.FencingToken)
	}
	second, err := store.Take(ctx, a)
	if err != nil || second.Attempts != 2 || second.FencingToken <= drawn {
		t.Fatalf("second Take: %+v %v, want attempt 2, a token above %d", second, err, drawn)
	}
	// The first attempt's token no longer owns the job.
	if err := store.MarkSucceeded(ctx, "acme", a.Key, first.FencingToken, "inv-1"); err == nil {
		t.Fatal("the superseded attempt marked the job succeeded")
	}
	if err := store.MarkSucceeded(ctx, "acme", a.Key, second.FencingToken, "inv-1"); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Take(ctx, a)
	if !errors.Is(err, execution.ErrSucceeded) || rec.ResultRef != "inv-1" {
		t.Fatalf("Take of a succeeded job: %+v %v, want ErrSucceeded with its result", rec, err)
	}
}

// TestTenantsAreSeparate: the same business key from two tenants is two
// jobs; one succeeding does not answer the other.
func TestTenantsAreSeparate(t *testing.T) {
	store := execution.New(testkit.Pool(t))
	ctx := t.Context()
	a := execution.Attempt{Tenant: "acme", Key: "invoice:o-1", Task: "invoice.create", Resource: "acme/order:o-1"}
	b := execution.Attempt{Tenant: "globex", Key: "invoice:o-1", Task: "invoice.create", Resource: "globex/order:o-1"}
	ra, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MarkSucceeded(ctx, "acme", a.Key, ra.FencingToken, "inv-a"); err != nil {
		t.Fatal(err)
	}
	rb, err := store.Take(ctx, b)
	if err != nil {
		t.Fatalf("globex's job with acme's business key: %v, want it to run", err)
	}
	if rb.Attempts != 1 || rb.Tenant != "globex" {
		t.Fatalf("globex's record: %+v, want its own first attempt", rb)
	}
	if _, err := store.Get(ctx, "initech", a.Key); !errors.Is(err, execution.ErrNotFound) {
		t.Fatalf("a third tenant sees %v, want ErrNotFound", err)
	}
}

// TestPayloadConflict: a key that succeeded, or is processing, with one
// payload refuses another payload; a failed key is taken by the new one.
func TestPayloadConflict(t *testing.T) {
	store := execution.New(testkit.Pool(t))
	ctx := t.Context()
	first := execution.Attempt{Tenant: "acme", Key: "invoice:o-2", Task: "invoice.create", Resource: "acme/order:o-2", PayloadSHA256: "aaa"}
	other := first
	other.PayloadSHA256 = "bbb"

	rec, err := store.Take(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Take(ctx, other); !errors.Is(err, execution.ErrConflict) {
		t.Fatalf("another payload while processing: %v, want ErrConflict", err)
	}
	if err := store.MarkFailed(ctx, "acme", first.Key, rec.FencingToken, "refused"); err != nil {
		t.Fatal(err)
	}
	rec, err = store.Take(ctx, other)
	if err != nil || rec.PayloadSHA256 != "bbb" || rec.Attempts != 1 {
		t.Fatalf("another payload after a failure: %+v %v, want it to take the key from attempt 1", rec, err)
	}
	if err := store.MarkSucceeded(ctx, "acme", first.Key, rec.FencingToken, "inv-b"); err != nil {
		t.Fatal(err)
	}
	got, err := store.Take(ctx, first)
	if !errors.Is(err, execution.ErrConflict) || got.ResultRef != "inv-b" {
		t.Fatalf("the first payload after the second succeeded: %+v %v, want ErrConflict", got, err)
	}
	if _, err := store.Take(ctx, other); !errors.Is(err, execution.ErrSucceeded) {
		t.Fatalf("the same payload again: %v, want ErrSucceeded (a replay)", err)
	}
}

// TestTakeAfterLostTail deletes what a failover to a standby behind its
// primary would lose of a job's last attempt: the resource's counter row,
// the execution row and its ledger row. The next Take must still draw a
// higher token than the lost attempt's, or a receiver that fences on it
// could not refuse the lost attempt's delivery from the new one's.
func TestTakeAfterLostTail(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	a := execution.Attempt{Tenant: "acme", Key: "invoice:lost", Task: "invoice.create", Resource: "order:lost"}

	lost, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DELETE FROM fencing_tokens WHERE resource = 'order:lost'`,
		`DELETE FROM job_attempts WHERE key = 'invoice:lost'`,
		`DELETE FROM job_executions WHERE key = 'invoice:lost'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	again, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if again.Attempts != 1 || again.FencingToken <= lost.FencingToken {
		t.Fatalf("Take after the loss: %+v, want a first attempt with a token above the lost one's %d", again, lost.FencingToken)
	}
	// The receiver's fence accepted the lost attempt's token; it accepts
	// the new one and refuses the lost one from now on.
	if err := fence.Check(ctx, pool, a.Resource, lost.FencingToken); err != nil {
		t.Fatal(err)
	}
	if err := fence.Check(ctx, pool, a.Resource, again.FencingToken); err != nil {
		t.Fatalf("the new attempt's token after the loss: %v", err)
	}
	if err := fence.Check(ctx, pool, a.Resource, lost.FencingToken); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("the lost attempt's token after the new one: %v, want ErrStaleToken", err)
	}
}
