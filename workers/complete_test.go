package workers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

// downDB is a job store's database that refuses every statement.
type downDB struct{}

func (downDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errStoreDown
}
func (downDB) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{errStoreDown} }
func (downDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errStoreDown
}

// outcomes lists how the attempts of job id ended, in order, leaving out
// the deliveries that found the lock busy.
func (e *env) outcomes(t *testing.T, id string) []string {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT coalesce(outcome, 'open') FROM job_attempts
 WHERE job_id = $1 AND outcome IS DISTINCT FROM 'lock_busy' ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// attemptOf is the execution.Attempt of another worker taking j's job.
func (e *env) attemptOf(j Job[order]) execution.Attempt {
	return execution.Attempt{Tenant: j.Tenant, Key: j.Key, Task: kind, Resource: j.Resource, Worker: "newer"}
}

// jobDoc is what the job document shows: status, attempts, result.
func (e *env) jobDoc(t *testing.T, id string) string {
	t.Helper()
	rec, err := job.NewStore(e.pool).ByID(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	ref := ""
	if rec.ResultRef != nil {
		ref = *rec.ResultRef
	}
	done := rec.FinishedAt != nil
	return fmt.Sprintf("%s #%d %q finished=%v", rec.Status, rec.Attempts, ref, done)
}

// The job document shows an attempt's start and its success from the
// statements that record them in the execution state, not from a write
// of its own: with Deps.Jobs unable to write anything, the jobs row still
// turns processing at attempt 1 while the effect runs, then succeeded
// with the result, and OnStatus is still told both.
func TestJobDocumentWrittenWithTheExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, task := e.submitJob(t, "acme", "d1", job.StatusQueued)
	var st statuses
	deps := e.deps(NopObserver{}, 5*time.Second)
	deps.Jobs = job.NewStore(downDB{})
	deps.OnStatus = st.fn
	var during string
	var calls atomic.Int64
	effect := plainEffect(e.pool, "A", &calls)
	h := Handle(deps, kind, orderKey, orderResource, func(ctx context.Context, j Job[order]) (string, error) {
		during = e.jobDoc(t, id)
		return effect(ctx, j)
	})
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	if want := `processing #1 "" finished=false`; during != want {
		t.Fatalf("job document during the effect = %s, want %s", during, want)
	}
	rec := e.recordOf(t, "acme", "effect:d1")
	if got, want := e.jobDoc(t, id), fmt.Sprintf("succeeded #1 %q finished=true", rec.ResultRef); got != want {
		t.Fatalf("job document after the success = %s, want %s", got, want)
	}
	if got := st.list(); len(got) != 2 || !strings.Contains(got[0], "processing") || !strings.Contains(got[1], "succeeded") {
		t.Fatalf("OnStatus told %q, want processing then succeeded", got)
	}
}

// txEffect is a business function that writes its effect and completes
// the job in one transaction, as Job.CompleteTx is meant to be used.
// before, if set, runs in the transaction after the effect's insert and
// before CompleteTx; after runs after CompleteTx, before the commit, and
// its error rolls everything back.
func txEffect(pool *pgxpool.Pool, worker string, calls *atomic.Int64, before, after func(ctx context.Context, j Job[order]) error) Func[order] {
	return func(ctx context.Context, j Job[order]) (string, error) {
		calls.Add(1)
		ref := fmt.Sprintf("effect-%d", j.Token)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO effects (job_key, resource, token, worker) VALUES ($1, $2, $3, $4)`,
				j.Key, j.Resource, j.Token, worker); err != nil {
				return err
			}
			if before != nil {
				if err := before(ctx, j); err != nil {
					return err
				}
			}
			if err := j.CompleteTx(ctx, tx, ref); err != nil {
				return err
			}
			if after != nil {
				return after(ctx, j)
			}
			return nil
		})
		return ref, err
	}
}

// An effect and its CompleteTx commit together or not at all: a
// transaction rolled back after CompleteTx leaves neither the effect nor
// a success, the attempt ends as a transient failure, and the next
// delivery applies the effect once and succeeds. A duplicate after that
// is acked without running.
func TestCompleteTxCommitsWithTheEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, task := e.submitJob(t, "acme", "c1", job.StatusQueued)
	deps := e.deps(NopObserver{}, 5*time.Second)
	deps.Jobs = job.NewStore(e.pool)
	var calls atomic.Int64
	var failCommit atomic.Bool
	failCommit.Store(true)
	h := Handle(deps, kind, orderKey, orderResource, txEffect(e.pool, "A", &calls, nil, func(context.Context, Job[order]) error {
		if failCommit.Swap(false) {
			return errors.New("commit refused (simulated)")
		}
		return nil
	}))
	if err := h.ProcessTask(t.Context(), task); err == nil {
		t.Fatal("first delivery: no error, want the rolled-back transaction's")
	}
	if got := e.effects(t, "effect:c1"); len(got) != 0 {
		t.Fatalf("effects after the rollback = %+v, want none", got)
	}
	if rec := e.recordOf(t, "acme", "effect:c1"); rec.Status != job.StatusProcessing {
		t.Fatalf("execution after the rollback = %s, want processing", rec.Status)
	}
	if got := e.jobDoc(t, id); !strings.HasPrefix(got, "retrying #1") {
		t.Fatalf("job document after the rollback = %s, want retrying at attempt 1", got)
	}
	for i := range 2 {
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatalf("delivery %d: %v", i+2, err)
		}
	}
	effects := e.effects(t, "effect:c1")
	if len(effects) != 1 || calls.Load() != 2 {
		t.Fatalf("effects = %+v after %d runs, want one effect from two runs", effects, calls.Load())
	}
	rec := e.recordOf(t, "acme", "effect:c1")
	if rec.Status != job.StatusSucceeded || rec.FencingToken != effects[0].Token || rec.ResultRef != fmt.Sprintf("effect-%d", rec.FencingToken) {
		t.Fatalf("execution = %+v, want succeeded by the effect's token %d", rec, effects[0].Token)
	}
	if got, want := e.jobDoc(t, id), fmt.Sprintf("succeeded #2 %q finished=true", rec.ResultRef); got != want {
		t.Fatalf("job document = %s, want %s", got, want)
	}
	if got, want := e.outcomes(t, id), []string{"transient", "succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
}

// CompleteTx is fenced by itself: when a newer attempt has taken the job
// while the effect ran, it refuses with a stale token, the transaction
// rolls back with the effect in it, and the attempt ends as a lost one,
// without a verdict.
func TestCompleteTxRefusesAStaleAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, task := e.submitJob(t, "acme", "s1", job.StatusQueued)
	deps := e.deps(NopObserver{}, 5*time.Second)
	var calls atomic.Int64
	h := Handle(deps, kind, orderKey, orderResource, txEffect(e.pool, "A", &calls, func(ctx context.Context, j Job[order]) error {
		// A newer owner takes the job (its worker found the lock gone).
		a := e.attemptOf(j)
		_, err := e.store.Take(ctx, a)
		return err
	}, nil))
	err := h.ProcessTask(t.Context(), task)
	if _, ok := errors.AsType[*OwnershipLostError](err); !ok || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("delivery: %v, want an *OwnershipLostError for a stale token", err)
	}
	if got := e.effects(t, "effect:s1"); len(got) != 0 {
		t.Fatalf("effects = %+v, want none: the stale attempt's transaction rolled back", got)
	}
	if rec := e.recordOf(t, "acme", "effect:s1"); rec.Status != job.StatusProcessing || rec.Attempts != 2 {
		t.Fatalf("execution = %+v, want processing, owned by the second attempt", rec)
	}
}

// CompleteTx on a Job made by hand, as a unit test of a business
// function makes one, writes nothing and does not fail, so such tests run
// the function as it is.
func TestCompleteTxOutsideAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := Job[order]{Tenant: "acme", Key: "effect:h1", Resource: "acme/order:h1", Token: 7}
	err := pgx.BeginFunc(t.Context(), e.pool, func(tx pgx.Tx) error { return j.CompleteTx(t.Context(), tx, "x") })
	if err != nil {
		t.Fatalf("CompleteTx on a hand-made Job: %v", err)
	}
	if _, err := e.store.Get(t.Context(), "acme", "effect:h1"); !errors.Is(err, execution.ErrNotFound) {
		t.Fatalf("execution record after it: %v, want none", err)
	}
}

// The kill test's child: IDEMGATE_WORKERS_KILL names where the worker
// process kills itself (SIGKILL, nothing deferred runs): "before-commit",
// after the effect's insert and CompleteTx with the transaction still
// open, or "after-commit", after the commit and before the ack.
const killEnv = "IDEMGATE_WORKERS_KILL"

func init() {
	if stage := os.Getenv(killEnv); stage != "" {
		os.Exit(killChild(stage))
	}
}

// killChild runs one delivery of the job that IDEMGATE_WORKERS_TASK names
// on the database and Redis the parent gives, and dies at stage. It
// returns only when something went wrong before it could die.
func killChild(stage string) int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "kill child:", err); return 3 }
	pool, err := pgxpool.New(ctx, os.Getenv("IDEMGATE_WORKERS_DB"))
	if err != nil {
		return fail(err)
	}
	opt, err := redis.ParseURL(os.Getenv("IDEMGATE_WORKERS_REDIS"))
	if err != nil {
		return fail(err)
	}
	deps := Deps{
		DB: pool, Redis: redis.NewClient(opt), Jobs: job.NewStore(pool),
		Lock: lock.Options{Prefix: os.Getenv("IDEMGATE_WORKERS_PREFIX"), TTL: 2 * time.Second},
	}
	die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	var calls atomic.Int64
	fn := txEffect(pool, "killed", &calls, nil, func(context.Context, Job[order]) error {
		if stage == "before-commit" {
			die()
		}
		return nil
	})
	h := Handle(deps, kind, orderKey, orderResource, fn)
	task := asynq.NewTaskWithHeaders(kind, []byte(os.Getenv("IDEMGATE_WORKERS_PAYLOAD")),
		map[string]string{job.HeaderID: os.Getenv("IDEMGATE_WORKERS_JOB"), job.HeaderTenant: "acme"})
	if err := h.ProcessTask(ctx, task); err != nil {
		return fail(err)
	}
	die()
	return 0
}

// runKilled runs one delivery of job id in a child process that SIGKILLs
// itself at stage, and checks that it died by the signal.
func (e *env) runKilled(t *testing.T, stage, id string, task *asynq.Task) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killEnv+"="+stage,
		"IDEMGATE_WORKERS_DB="+e.pool.Config().ConnString(),
		"IDEMGATE_WORKERS_REDIS="+testkit.RedisURL(t),
		"IDEMGATE_WORKERS_PREFIX="+e.prefix,
		"IDEMGATE_WORKERS_JOB="+id,
		"IDEMGATE_WORKERS_PAYLOAD="+string(task.Payload()))
	out, err := cmd.CombinedOutput()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("worker child (%s): %v, want killed by SIGKILL; output:\n%s", stage, err, out)
	}
}

// A worker process killed between its effect and the commit of the
// transaction that holds both the effect and its CompleteTx leaves
// neither: PostgreSQL rolls the transaction back when the connection
// dies. The next worker, once the dead one's lock has expired, runs the
// effect once under a higher token and records it; the ledger shows the
// killed attempt as crashed. Killed after the commit instead, the job is
// done: the next delivery is acked from the state without running.
func TestWorkerKilledAroundTheCommit(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"before-commit", "after-commit"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			id, task := e.submitJob(t, "acme", "k1", job.StatusQueued)
			e.runKilled(t, stage, id, task)

			killed := e.recordOf(t, "acme", "effect:k1")
			effects := e.effects(t, "effect:k1")
			switch stage {
			case "before-commit":
				if len(effects) != 0 || killed.Status != job.StatusProcessing {
					t.Fatalf("after the kill: effects %+v, execution %s; want none, processing", effects, killed.Status)
				}
				if got := e.jobDoc(t, id); !strings.HasPrefix(got, "processing #1") {
					t.Fatalf("job document after the kill = %s, want processing at attempt 1", got)
				}
			default:
				if len(effects) != 1 || killed.Status != job.StatusSucceeded {
					t.Fatalf("after the kill: effects %+v, execution %s; want one, succeeded", effects, killed.Status)
				}
			}

			deps := e.deps(NopObserver{}, 5*time.Second)
			deps.Jobs = job.NewStore(e.pool)
			var calls atomic.Int64
			h := Handle(deps, kind, orderKey, orderResource, txEffect(e.pool, "B", &calls, nil, nil))
			testkit.Eventually(t, "the next delivery to be done", 60*time.Second, func() bool {
				err := h.ProcessTask(t.Context(), task)
				if err != nil && !errors.Is(err, lock.ErrBusy) {
					t.Fatalf("next delivery: %v", err)
				}
				return err == nil
			})

			effects = e.effects(t, "effect:k1")
			rec := e.recordOf(t, "acme", "effect:k1")
			if len(effects) != 1 || rec.Status != job.StatusSucceeded || effects[0].Token != rec.FencingToken {
				t.Fatalf("effects %+v, execution %+v: want one effect, succeeded by its token", effects, rec)
			}
			wantLedger, wantRuns, wantWorker := []string{"crashed", "succeeded"}, int64(1), "B"
			if stage == "after-commit" {
				wantLedger, wantRuns, wantWorker = []string{"succeeded"}, 0, "killed"
			}
			if calls.Load() != wantRuns || effects[0].Worker != wantWorker {
				t.Fatalf("the next worker ran the effect %d times, the effect is %q's: want %d, %q", calls.Load(), effects[0].Worker, wantRuns, wantWorker)
			}
			if got := e.outcomes(t, id); !slices.Equal(got, wantLedger) {
				t.Fatalf("ledger = %q, want %q", got, wantLedger)
			}
			if got := e.jobDoc(t, id); !strings.HasPrefix(got, "succeeded") {
				t.Fatalf("job document = %s, want succeeded", got)
			}
		})
	}
}
