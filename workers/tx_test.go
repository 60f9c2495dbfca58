package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/fence"
)

// insertEffect writes j's effect row in tx.
func insertEffect(ctx context.Context, tx pgx.Tx, j Job[order], worker string) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, $4)`,
		j.Key, j.Resource, j.Token, worker)
	return err
}

// With HandleTx the effect and the job's success commit together: a
// function that wrote its effect and then failed leaves neither (the
// attempt ends as a transient failure, the job retrying), and the next
// delivery writes the effect once and ends the job succeeded, its result
// in the job document, while the job document showed the attempt running
// during the effect.
func TestHandleTxCommitsTheEffectWithTheSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, task := e.submitJob(t, "acme", "t1", job.StatusQueued)
	deps := e.deps(NopObserver{}, 5*time.Second)
	deps.Jobs = job.NewStore(e.pool)
	var calls atomic.Int64
	var during []string
	h := HandleTx(deps, kind, orderKey, orderResource, func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
		during = append(during, e.jobDoc(t, id))
		if err := insertEffect(ctx, tx, j, "A"); err != nil {
			return "", err
		}
		if calls.Add(1) == 1 {
			return "", errors.New("partner said no (simulated)")
		}
		return fmt.Sprintf("effect-%d", j.Token), nil
	})
	if err := h.ProcessTask(t.Context(), task); err == nil {
		t.Fatal("first delivery: no error, want the function's")
	}
	if got := e.effects(t, "effect:t1"); len(got) != 0 {
		t.Fatalf("effects after the failed attempt = %+v, want none: its transaction rolled back", got)
	}
	if got := e.jobDoc(t, id); !strings.HasPrefix(got, "retrying #1") {
		t.Fatalf("job document after the failed attempt = %s, want retrying at attempt 1", got)
	}
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	effects := e.effects(t, "effect:t1")
	rec := e.recordOf(t, "acme", "effect:t1")
	if len(effects) != 1 || rec.Status != job.StatusSucceeded || rec.FencingToken != effects[0].Token {
		t.Fatalf("effects %+v, execution %+v: want one effect, succeeded by its token", effects, rec)
	}
	if got, want := e.jobDoc(t, id), fmt.Sprintf("succeeded #2 %q finished=true", fmt.Sprintf("effect-%d", rec.FencingToken)); got != want {
		t.Fatalf("job document = %s, want %s", got, want)
	}
	if got, want := e.outcomes(t, id), []string{"transient", "succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	if want := []string{`processing #1 "" finished=false`, `processing #2 "" finished=false`}; !slices.Equal(during, want) {
		t.Fatalf("job document during the effects = %q, want %q", during, want)
	}
	// A duplicate delivery is acked without running the function.
	if err := h.ProcessTask(t.Context(), task); err != nil || calls.Load() != 2 {
		t.Fatalf("duplicate delivery: %v after %d runs, want acked without a third run", err, calls.Load())
	}
}

// The completion that goes out with COMMIT is fenced in the server: when a
// newer attempt took the job while the effect ran, the completion is
// refused, the COMMIT behind it rolls back the effect, and the attempt ends
// as a lost one, the job still the newer attempt's.
func TestHandleTxRefusesAStaleAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, task := e.submitJob(t, "acme", "t2", job.StatusQueued)
	deps := e.deps(NopObserver{}, 5*time.Second)
	h := HandleTx(deps, kind, orderKey, orderResource, func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
		if err := insertEffect(ctx, tx, j, "A"); err != nil {
			return "", err
		}
		// A newer owner takes the job (its worker found the lock gone).
		_, err := e.store.Take(ctx, e.attemptOf(j))
		return "stale", err
	})
	err := h.ProcessTask(t.Context(), task)
	if _, ok := errors.AsType[*OwnershipLostError](err); !ok || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("delivery: %v, want an *OwnershipLostError for a stale token", err)
	}
	if got := e.effects(t, "effect:t2"); len(got) != 0 {
		t.Fatalf("effects = %+v, want none: the stale attempt's transaction rolled back", got)
	}
	if rec := e.recordOf(t, "acme", "effect:t2"); rec.Status != job.StatusProcessing || rec.Attempts != 2 {
		t.Fatalf("execution = %+v, want processing, owned by the second attempt", rec)
	}
}

// The transaction is a whole pgx.Tx: a read as its first statement, a
// savepoint rolled back, a batch; what fn wrote outside the rolled-back
// savepoint commits with the success. fn cannot end it itself, and a
// function that wrote nothing through it is recorded as Handle records it.
func TestHandleTxTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	deps := e.deps(NopObserver{}, 5*time.Second)
	h := HandleTx(deps, kind, orderKey, orderResource, func(ctx context.Context, tx pgx.Tx, j Job[order]) (string, error) {
		if j.Payload.OrderID == "none" {
			return "nothing written", nil
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM effects WHERE job_key = $1`, j.Key).Scan(&n); err != nil || n != 0 {
			return "", fmt.Errorf("first read: %d effects, %v", n, err)
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return "", err
		}
		if err := insertEffect(ctx, sp, j, "savepoint"); err != nil {
			return "", err
		}
		if err := sp.Rollback(ctx); err != nil {
			return "", err
		}
		var b pgx.Batch
		b.Queue(`INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, 'batch')`, j.Key, j.Resource, j.Token)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return "", err
		}
		if err := tx.Commit(ctx); !errors.Is(err, ErrTxOwned) {
			return "", fmt.Errorf("Commit by the function: %v, want ErrTxOwned", err)
		}
		return "batched", nil
	})
	if err := h.ProcessTask(t.Context(), newTask(t, "t3")); err != nil {
		t.Fatal(err)
	}
	if got := e.effects(t, "effect:t3"); len(got) != 1 || got[0].Worker != "batch" {
		t.Fatalf("effects = %+v, want the batch's only", got)
	}
	if rec := e.recordOf(t, "", "effect:t3"); rec.Status != job.StatusSucceeded || rec.ResultRef != "batched" {
		t.Fatalf("execution = %+v, want succeeded with the function's result", rec)
	}
	if err := h.ProcessTask(t.Context(), newTask(t, "none")); err != nil {
		t.Fatal(err)
	}
	if rec := e.recordOf(t, "", "effect:none"); rec.Status != job.StatusSucceeded || rec.ResultRef != "nothing written" {
		t.Fatalf("execution = %+v, want succeeded with the function's result", rec)
	}
}

// HandleTx needs a database that hands out connections: anything else is
// a wiring mistake, refused at start-up.
func TestHandleTxNeedsAPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	deps := e.deps(NopObserver{}, 5*time.Second)
	deps.DB = downDB{}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "*pgxpool.Pool") {
			t.Fatalf("HandleTx on a database without connections: panic %v, want one naming *pgxpool.Pool", r)
		}
	}()
	HandleTx(deps, kind, orderKey, orderResource, func(context.Context, pgx.Tx, Job[order]) (string, error) { return "", nil })
}
