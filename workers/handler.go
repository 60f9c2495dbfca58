package workers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/flowlimit"
	"github.com/idemgate/idemgate/workers/lock"
)

// DB is the PostgreSQL handle the framework keeps its state in
// (job_executions and the fence tables). A *pgxpool.Pool satisfies it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// StatusFunc is told each time a job's status changes (job.StatusProcessing,
// job.StatusRetrying, job.StatusSucceeded, job.StatusFailed), with the attempts so far,
// the result reference once succeeded and the last error as the job's tenant
// may read it: a stable reason ("receiver answered 500", "receiver timed
// out", "the attempt failed"), never the error's own text, which may name
// internal hosts or credentials and is kept for operators in the attempt
// ledger and the log. It is empty when nothing failed. It also runs for
// a replayed delivery of a succeeded job, so a record kept from it catches
// up after a crash. It runs on the handler's goroutine: keep it short. An
// error it returns is logged, and changes nothing of the job: the execution
// state, not this report, is the truth. job.Store.Follow is one, but to
// keep the job documents of submitted jobs set Deps.Jobs instead, which
// writes the start and the success in the execution state's own commits.
type StatusFunc func(ctx context.Context, task *asynq.Task, key string, status job.Status, attempts int, resultRef, lastErr string) error

// Deps is what an idempotent handler needs. Config.Deps builds one from the
// configuration.
type Deps struct {
	// DB holds job_executions and the fence tables. Required.
	DB DB
	// Redis holds the resource locks. Required. Give asynq a client of its
	// own: its polling must not queue behind lock renewals.
	Redis lock.Client
	// Lock configures the locks: TTL is lock_ttl (default 30s), Prefix the
	// key prefix (default none). Leave Wait at 0: a busy lock reschedules
	// the task rather than holding a worker slot. The handler chains its
	// own OnRenewed and OnLost after any set here.
	Lock lock.Options
	// MaxAttempts is how many real attempts a job gets. Default 10.
	MaxAttempts int
	// Logger receives one record per decision. Default: discarded.
	Logger *slog.Logger
	// Observer counts events. Default NopObserver.
	Observer Observer
	// OnStatus, if set, is told each job's status.
	OnStatus StatusFunc
	// Jobs, if set, keeps the job documents of submitted jobs (tasks
	// carrying a job.HeaderID) up to date, as `idemgate worker` does. An
	// attempt's start and its success are written into the jobs row by
	// the statements that record them in the execution state, so in the
	// same commits; every other change (retrying, failed, cancelled, a
	// duplicate delivery of a job whose key has succeeded) is written
	// through Jobs.Follow. Setting OnStatus to Jobs.Follow instead also
	// works, at one commit more per start and per success.
	Jobs *job.Store
	// Worker names this worker in the attempt ledger (job_attempts).
	// Default "<hostname>:<pid>".
	Worker string
	// Cancels, if set, is the process's cancel watcher: the attempts of
	// submitted jobs (tasks with a job.HeaderID) register with it, a Go
	// handler's context is cancelled when its job is, and an attempt that
	// ends without success after a cancel ends the job cancelled. Give the
	// Server the same watcher (WithCancelWatcher).
	Cancels *CancelWatcher
	// LimitBusy is the mean delay after a flow limit's slots were all
	// held; the delay is drawn from [LimitBusy/2, 3·LimitBusy/2). Default
	// DefaultRetryBusy, 2s. (A spent rate waits exactly as long as it
	// says.)
	LimitBusy time.Duration
	// LimitWait bounds how long a delivery a flow limit refused waits in
	// place, holding its worker, for the limit to admit it before its task
	// is sent back to the queue. Default DefaultLimitWait, 1s; negative:
	// never wait in place.
	LimitWait time.Duration
	// Pauses, if set, sends back the deliveries of paused work without
	// counting an attempt (a *job.PauseCache, which answers from memory).
	// It also opens the breakers of limits that declare pause_after.
	Pauses Pauses
	// PauseRecheck is the mean delay after which a delivery a pause sent
	// back comes again, drawn from [PauseRecheck/2, 3·PauseRecheck/2) and
	// never past the pause's end. Default DefaultPauseRecheck, 5s.
	PauseRecheck time.Duration
}

// Stages at which tests make a worker die.
const (
	stageTaken     = "taken"     // after marking processing, before the effect
	stageEffect    = "effect"    // after the business function returned, before its outcome is recorded
	stageSucceeded = "succeeded" // after marking succeeded, before the ack
)

// errCrashed is what a handler that "died" returns (tests only).
var errCrashed = errors.New("workers: worker died (simulated)")

// finishTimeout bounds the writes that record an attempt's outcome. They
// run even when the task's context has just been cancelled (a shutdown), so
// a finished effect is recorded instead of being run again.
const finishTimeout = 10 * time.Second

// Option adjusts one handler.
type Option func(*options)

type options struct {
	maxAttempts int
	// crash simulates the worker dying at a stage (tests only): the handler
	// abandons its lease and returns without another write.
	crash func(stage string) bool
	// uninterrupted: a cancel does not cancel the business function's
	// context; its own end decides (an HTTP delivery: the request is not
	// aborted, the receiver's answer decides).
	uninterrupted bool
	// limits are the flow limits each attempt takes (WithLimits).
	limits []job.FlowLimitUse
	// flushLater: the takes need not wait for their WAL flush, the
	// effect's synchronous commit flushes them (HandleTx).
	flushLater bool
}

// WithMaxAttempts overrides Deps.MaxAttempts for one handler.
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// takeLanes is how many batches of takes (and successes) a handler's
// store has in flight. Takes that need not wait for their flush get one
// lane: such a batch is back in a fraction of a millisecond, and the takes
// queued behind it share the next one (at concurrency 10, 2.3 takes a
// batch instead of 1.4 with two lanes, so 1.4 commits a job instead of
// 1.7). A batch held up by a row lock gives its lane back after the batch
// lock timeout.
func takeLanes(flushLater bool) int {
	if flushLater {
		return 1
	}
	return execution.DefaultBatchLanes
}

// identity derives a job's business key and resource from its payload,
// both still unscoped by tenant.
type identity[T any] func(raw []byte, payload T) (key, resource string, err error)

type handler[T any] struct {
	kind        string
	identify    identity[T]
	fn          Func[T]
	db          DB
	store       *execution.Store
	locker      *lock.Locker
	maxAttempts int
	log         *slog.Logger
	obs         Observer
	onStatus    StatusFunc
	jobs        *job.Store
	worker      string
	crash       func(string) bool
	cancels     *CancelWatcher
	// uninterrupted: see options.
	uninterrupted bool
	// flushLater: the take need not wait for its WAL flush, the effect's
	// commit flushes it (HandleTx, execution.Attempt.FlushLater).
	flushLater   bool
	limits       *limits
	pauses       Pauses
	pauseRecheck time.Duration
	rand         func(n int64) int64
}

// Handle returns the asynq handler of the task kind (a stable name such as
// `invoice.create`): it decodes the JSON payload into T, derives the job's
// key and resource with key and resource, and runs fn at most once to
// success per key, serialised per resource:
//
//  0. a task handed over before its job's not_before (job.HeaderNotBefore)
//     is given back until then, without reading anything or counting an
//     attempt (*NotDueError);
//  1. the resource lock is taken. When it is busy, the job's state is
//     read: a job whose key has succeeded is acked at once (a duplicate
//     whose worker died before the ack, still holding the lock), any other
//     is rescheduled soon without counting an attempt (*LockBusyError);
//  2. the job's flow limits (Spec.Limits) are taken, all or none, or the
//     task goes back after the limit's wait without counting an attempt
//     (*LimitedError). A task with limits reads its state while the lock
//     is being taken, so that a duplicate spends none of a limit;
//  3. a fencing token is drawn and the job marked processing, counting the
//     attempt, in one statement that also refuses a job whose key has
//     succeeded (the duplicate is acked) or another payload holds, and a
//     cancelled job (the task is then acked and does nothing), and writes
//     the attempt's ledger row and the job document;
//  4. fn runs under the lease's context with the token; a cancel of the
//     job cancels that context (Deps.Cancels), except for an HTTP
//     delivery, whose answer decides;
//  5. the job is marked succeeded with fn's result, with its ledger row
//     and document, in one statement, and only then acked. fn may have
//     done that itself in its own transaction (Job.CompleteTx), so that
//     its effect and its success commit together; otherwise the writes of
//     steps 3 and 5 share commits with concurrent jobs', each answered
//     only after its commit, and a failure to record the success is
//     retried in place while the lease holds, for a few lock TTLs at
//     most, so a database blink does not run the effect again;
//  6. a permanent error, or a transient one on the last attempt, marks the
//     job failed and archives the task; a transient one is retried with
//     backoff; an unavailable dependency is retried with backoff and the
//     attempt given back; a lost lease or stale token retries without
//     failing; after a cancel, any end but success ends the job cancelled;
//  7. the limits' slots and the lock are released if still ours.
//
// Handle panics if deps lacks DB or Redis, or if kind, key, resource or fn
// is missing: those are wiring mistakes, found at start-up.
func Handle[T any](deps Deps, kind string, key, resource func(T) string, fn Func[T], opts ...Option) asynq.Handler {
	if key == nil || resource == nil {
		panic("workers: Handle " + kind + ": nil key or resource function")
	}
	return newHandler(deps, kind, func(_ []byte, p T) (string, string, error) { return key(p), resource(p), nil }, fn, opts...)
}

func newHandler[T any](deps Deps, kind string, identify identity[T], fn Func[T], opts ...Option) *handler[T] {
	switch {
	case deps.DB == nil:
		panic("workers: Handle " + kind + ": Deps.DB is nil")
	case deps.Redis == nil:
		panic("workers: Handle " + kind + ": Deps.Redis is nil")
	case kind == "":
		panic("workers: Handle: empty task kind")
	case identify == nil || fn == nil:
		panic("workers: Handle " + kind + ": nil business function")
	}
	o := options{maxAttempts: deps.MaxAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxAttempts <= 0 {
		o.maxAttempts = DefaultMaxAttempts
	}
	obs := deps.Observer
	if obs == nil {
		obs = NopObserver{}
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lockOpts := deps.Lock
	lim := newLimits(deps, kind, o.limits, cmp.Or(lockOpts.TTL, lock.DefaultTTL), obs, log.With("task", kind))
	onRenewed, onLost := lockOpts.OnRenewed, lockOpts.OnLost
	lockOpts.OnRenewed = func(resource string) {
		obs.LockRenewed()
		if lim != nil {
			lim.renewed(resource)
		}
		if onRenewed != nil {
			onRenewed(resource)
		}
	}
	lockOpts.OnLost = func(resource string, cause error) {
		obs.LockLost()
		if onLost != nil {
			onLost(resource, cause)
		}
	}
	locker, err := lock.New(deps.Redis, lockOpts)
	if err != nil {
		panic(fmt.Sprintf("workers: Handle %s: %v", kind, err))
	}
	// Concurrent jobs share the commits of Take and MarkSucceeded when DB
	// is a pool (execution.WithBatching).
	return &handler[T]{
		kind:        kind,
		identify:    identify,
		fn:          fn,
		db:          deps.DB,
		store:       execution.New(deps.DB, execution.WithBatching(takeLanes(o.flushLater), execution.DefaultBatchMax)),
		locker:      locker,
		maxAttempts: o.maxAttempts,
		log:         log.With("task", kind),
		obs:         obs,
		onStatus:    deps.OnStatus,
		jobs:        deps.Jobs,
		worker:      workerName(deps.Worker),
		crash:       o.crash,
		cancels:     deps.Cancels,
		limits:      lim,
		pauses:      deps.Pauses,
		rand:        mathrand.Int64N,

		pauseRecheck:  cmp.Or(deps.PauseRecheck, DefaultPauseRecheck),
		uninterrupted: o.uninterrupted,
		flushLater:    o.flushLater,
	}
}

// ProcessTask runs one delivery of the task.
func (h *handler[T]) ProcessTask(ctx context.Context, task *asynq.Task) error {
	log := h.log
	if id, ok := asynq.GetTaskID(ctx); ok {
		log = log.With("job_id", id)
	}
	if err := giveBackEarly(ctx, log, task); err != nil {
		return err
	}
	var payload T
	if err := json.Unmarshal(task.Payload(), &payload); err != nil {
		return h.unprocessable(ctx, log, task, fmt.Errorf("decode payload: %w", err))
	}
	key, resource, err := h.identify(task.Payload(), payload)
	if k := task.Headers()[job.HeaderBusinessKey]; k != "" && err == nil {
		// A schedule's fire: the same body at every slot, a key per slot.
		key = k
	}
	if err == nil && (key == "" || resource == "") {
		err = fmt.Errorf("payload gives key %q, resource %q", key, resource)
	}
	if err != nil {
		return h.unprocessable(ctx, log, task, err)
	}
	sha, err := payloadSHA256(task.Payload())
	if err != nil {
		return h.unprocessable(ctx, log, task, err)
	}
	tenant := task.Headers()[job.HeaderTenant]
	resource = Scope(tenant, resource)
	log = log.With("tenant", tenant, "job_key", key, "resource", resource)
	id := execID{tenant: tenant, key: key, sha: sha, job: task.Headers()[job.HeaderID]}
	// A submitted job's task runs only while its jobs row exists (Take
	// checks it): one that outlived its job, replayed from asynq's
	// archive after the jobs retention, is acked without running.
	id.recorded = id.job != "" && h.jobs != nil
	id.debounce, _ = strconv.Atoi(task.Headers()[job.HeaderDebounce])
	if id.job == "" {
		id.job, _ = asynq.GetTaskID(ctx)
	}
	var rules []flowlimit.Rule
	if h.limits != nil {
		if rules, err = h.limits.rules(id.tenant, task.Payload()); err != nil {
			return h.unprocessable(ctx, log, task, err)
		}
	}
	// Paused work goes back before it takes anything (pause.go).
	if err := h.bouncePaused(ctx, log, id, resource, rules); err != nil {
		return err
	}

	// No read of the state before the lock: Take, under the lock, refuses
	// a job whose key has succeeded (a duplicate delivery is acked from
	// its answer) or is held by another payload, so an earlier read
	// decided nothing that Take does not decide again, and cost every job
	// a query and a transaction. A job with flow limits still reads it,
	// while the lock is being taken, so that a duplicate delivery spends
	// none of a partner's budget (see readState).
	var lease *lock.Lease
	var lerr error
	if h.limits != nil {
		var done bool
		lease, lerr, done, err = h.readState(ctx, log, task, id, resource)
		if done {
			return err
		}
	} else {
		lease, lerr = h.locker.Acquire(ctx, resource)
	}

	switch err = lerr; {
	case errors.Is(err, lock.ErrBusy):
		// A busy resource may hold a duplicate of a job that has
		// succeeded (its worker died between the record and the ack,
		// still holding the lock): read the state, on this contended
		// path only, and answer the duplicate from it at once.
		if h.limits == nil {
			if rec, gerr := h.store.Get(ctx, tenant, key); gerr == nil && decides(rec, id) {
				return h.answer(ctx, log, task, id, rec)
			}
		}
		h.obs.LockAcquire(LockBusy)
		h.obs.Attempt(h.kind, ClassLockBusy)
		h.warnIfBudgetSpent(ctx, log)
		log.DebugContext(ctx, "resource locked by another worker: rescheduling", "lock_event", "busy")
		if berr := h.store.RecordBusy(ctx, h.attempt(id, resource)); berr != nil {
			log.WarnContext(ctx, "recording the busy attempt failed", "error", berr)
		}
		return &LockBusyError{Task: h.kind, Key: key, Resource: resource, Err: err}
	case err != nil:
		h.obs.LockAcquire(LockError)
		return h.transientBeforeAttempt(ctx, log, err)
	}
	h.obs.LockAcquire(LockAcquired)
	log.DebugContext(ctx, "lock acquired", "lock_event", "acquired")

	// The flow limits are taken holding the lock and before the attempt
	// counts (limits.go): a replay never spends one, and a limited
	// delivery leaves the job as it was.
	hold, err := h.takeLimits(ctx, lease.Context(), log, id, resource, rules)
	if err != nil {
		h.release(ctx, log, lease)
		return err
	}
	r := &run[T]{h: h, log: log, task: task, lease: lease, id: id, resource: resource, payload: payload}
	err = r.do(ctx)
	if errors.Is(err, errCrashed) {
		h.abandonLimits(resource, hold)
		lease.Abandon()
		return err
	}
	h.releaseWithLimits(ctx, log, lease, resource, hold, rules, r.end)
	return err
}

// readState reads the job's execution state while the lock is being
// taken, the two going out together, and decides from the state first:
// a job that has succeeded, or whose key another payload holds, is
// answered from it whatever the lock said (done true, with the handler's
// result), and a lock taken for it is released at once. Otherwise it
// returns the lock's outcome. Only jobs with flow limits read first; the
// read changes nothing that Take would not decide under the lock.
func (h *handler[T]) readState(ctx context.Context, log *slog.Logger, task *asynq.Task, id execID, resource string) (lease *lock.Lease, lerr error, done bool, err error) {
	type state struct {
		rec execution.State
		err error
	}
	read := make(chan state, 1)
	go func() {
		rec, err := h.store.Get(ctx, id.tenant, id.key)
		read <- state{rec, err}
	}()
	lease, lerr = h.locker.Acquire(ctx, resource)
	st := <-read
	rec, err := st.rec, st.err
	if errors.Is(err, execution.ErrNotFound) {
		err = nil // a new job: rec is the zero record
	}
	if err == nil && !decides(rec, id) {
		return lease, lerr, false, nil
	}
	if lease != nil {
		h.release(ctx, log, lease)
	}
	if err != nil {
		return nil, nil, true, h.transientBeforeAttempt(ctx, log, err)
	}
	return nil, nil, true, h.answer(ctx, log, task, id, rec)
}

// decides reports whether the execution state rec answers a delivery of
// id without an attempt: its key has succeeded, or another payload holds
// it. A debounced job's task is left to the take, which alone knows
// whether a later submit superseded it: read without the job's row, its
// older body would look like another payload's.
func decides(rec execution.State, id execID) bool {
	if id.debounce > 0 {
		return false
	}
	return execution.Conflicts(rec, id.sha) || rec.Status == job.StatusSucceeded
}

// answer answers a delivery that rec decides: the job fails when another
// payload holds its key, and the duplicate of a succeeded job is acked.
func (h *handler[T]) answer(ctx context.Context, log *slog.Logger, task *asynq.Task, id execID, rec execution.State) error {
	if execution.Conflicts(rec, id.sha) {
		return h.conflict(ctx, log, task, id, rec)
	}
	return h.replay(ctx, log, task, rec)
}

// release deletes the lock if it is still ours.
func (h *handler[T]) release(ctx context.Context, log *slog.Logger, lease *lock.Lease) {
	fctx, cancel := finishContext(ctx)
	defer cancel()
	if rerr := lease.Release(fctx); rerr != nil {
		// The key expires by itself after the TTL; the job's outcome stands.
		log.WarnContext(ctx, "lock release failed", "lock_event", "release_failed", "error", rerr)
	} else {
		log.DebugContext(ctx, "lock released", "lock_event", "released")
	}
}

// execID names a job's execution state: its tenant, its business key and
// the hash of its payload.
type execID struct {
	tenant, key, sha string
	job              string // the asynq task id, for the ledger
	// recorded: job names a jobs row that must exist (Deps.Jobs is set
	// and the task carries a job.HeaderID).
	recorded bool
	// debounce is the version of a debounced job the task carries
	// (job.HeaderDebounce); 0 for any other task.
	debounce int
}

// attempt is the execution.Attempt of id on resource.
func (h *handler[T]) attempt(id execID, resource string) execution.Attempt {
	return execution.Attempt{
		Tenant: id.tenant, Key: id.key, Task: h.kind, Resource: resource, PayloadSHA256: id.sha,
		JobID: id.job, JobRecorded: id.recorded, Worker: h.worker, Debounce: id.debounce,
		FlushLater: h.flushLater,
	}
}

// workerName is Deps.Worker or its default.
func workerName(name string) string {
	if name != "" {
		return name
	}
	host, err := os.Hostname()
	if err != nil {
		host = "worker"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// run is one attempt holding the lock.
type run[T any] struct {
	h        *handler[T]
	log      *slog.Logger
	task     *asynq.Task
	lease    *lock.Lease
	id       execID
	resource string
	payload  T
	token    int64
	attempts int
	// watched is the attempt as the cancel watcher knows it; nil for a
	// task without a job record, or without a watcher.
	watched *watched
	// end is how the business function ended, for the limits' breakers.
	end attemptEnd
}

func (r *run[T]) do(ctx context.Context) error {
	h := r.h
	lctx := r.lease.Context()
	// The token is drawn and the job marked processing in one commit.
	rec, err := h.store.Take(lctx, h.attempt(r.id, r.resource))
	switch {
	case errors.Is(err, execution.ErrConflict):
		return h.conflict(ctx, r.log, r.task, r.id, rec)
	case errors.Is(err, execution.ErrSucceeded):
		return h.replay(ctx, r.log, r.task, rec)
	case errors.Is(err, execution.ErrCancelled):
		return h.refuseCancelled(ctx, r.log, r.task, r.id)
	case errors.Is(err, execution.ErrNoJob):
		return h.refuseGone(ctx, r.log)
	case errors.Is(err, execution.ErrSuperseded):
		return h.refuseSuperseded(ctx, r.log)
	case err != nil:
		return r.beforeAttempt(ctx, err)
	}
	token := rec.FencingToken
	r.token = token
	r.log = r.log.With("fencing_token", token)
	r.attempts = rec.Attempts
	r.log = r.log.With("attempt", rec.Attempts)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("idemgate.resource", r.resource),
			attribute.Int64("idemgate.fencing_token", token), attribute.Int("idemgate.attempt", rec.Attempts))
	}
	if rec.Attempts > h.maxAttempts {
		// The attempts ran out without a verdict (the last ones were
		// cancelled by asynq or lost their lease): do not start another.
		fctx, cancel := finishContext(ctx)
		defer cancel()
		cause := rec.LastError
		if cause == "" {
			cause = reasonNoVerdict
		}
		return r.deadLetter(ctx, fctx, &reasoned{reason: reasonNoVerdict, err: errors.New(cause)}, false)
	}
	r.log.InfoContext(ctx, "attempt started", "lock_event", "held")
	// rec.LastError is the full text, not for the job document, which
	// keeps the reason it was last given.
	h.report(ctx, r.task, r.id.key, job.StatusProcessing, rec.Attempts, "", "", true) // Take wrote it
	if h.crashAt(stageTaken) {
		return errCrashed
	}

	fnCtx := lctx
	if jobID := r.task.Headers()[job.HeaderID]; jobID != "" && h.cancels != nil {
		var stop context.CancelCauseFunc
		if !h.uninterrupted {
			var cctx context.Context
			cctx, stop = context.WithCancelCause(lctx)
			defer stop(nil)
			fnCtx = cctx
		}
		var unwatch func()
		r.watched, unwatch = h.cancels.watch(jobID, stop)
		defer unwatch()
	}
	var done completion
	ref, ferr := h.fn(fnCtx, Job[T]{
		Key: r.id.key, Tenant: r.id.tenant, Resource: r.resource, Payload: r.payload,
		Token: token, Attempt: rec.Attempts, Task: r.task, completion: &done,
	})
	r.end = attemptSucceeded
	if ferr != nil {
		r.end = attemptFailed
	}
	if h.crashAt(stageEffect) {
		return errCrashed
	}
	if ferr != nil {
		fctx, cancel := finishContext(ctx)
		defer cancel()
		return r.failed(ctx, fctx, ferr)
	}
	switch {
	case done.done:
		// The success committed with the effect (Job.CompleteTx).
		ref = done.ref
		h.report(ctx, r.task, r.id.key, job.StatusSucceeded, r.attempts, ref, "", true)
	default:
		// The effect is done: a failure to record it retries the record,
		// not the effect (record.go).
		if err := r.recordSuccess(ctx, ref); err != nil {
			return err
		}
	}
	h.obs.JobFinished(h.kind, job.StatusSucceeded)
	r.log.InfoContext(ctx, "job succeeded", "result_ref", ref)
	if h.crashAt(stageSucceeded) {
		return errCrashed
	}
	return nil
}

// status reports a job's status change: to Deps.Jobs when the execution
// state's own statement did not write it (written false), and to
// Deps.OnStatus.
func (h *handler[T]) status(ctx context.Context, task *asynq.Task, key string, status job.Status, attempts int, resultRef, lastErr string) {
	h.report(ctx, task, key, status, attempts, resultRef, lastErr, false)
}

func (h *handler[T]) report(ctx context.Context, task *asynq.Task, key string, status job.Status, attempts int, resultRef, lastErr string, written bool) {
	if h.jobs != nil && !written {
		if err := h.jobs.Follow(ctx, task, key, status, attempts, resultRef, lastErr); err != nil {
			h.log.WarnContext(ctx, "job status not recorded", "job_id", task.Headers()[job.HeaderID], "status", status, "err", err)
		}
	}
	if h.onStatus == nil {
		return
	}
	if err := h.onStatus(ctx, task, key, status, attempts, resultRef, lastErr); err != nil {
		h.log.WarnContext(ctx, "job status not recorded", "job_id", task.Headers()[job.HeaderID], "status", status, "err", err)
	}
}

func (h *handler[T]) crashAt(stage string) bool { return h.crash != nil && h.crash(stage) }

// budgetSpent reports whether asynq will archive the task on this failure
// whatever the handler returns: it was enqueued with a MaxRetry the task
// has used up.
func budgetSpent(ctx context.Context) bool {
	retried, ok1 := asynq.GetRetryCount(ctx)
	maxRetry, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && retried >= maxRetry
}

func (h *handler[T]) warnIfBudgetSpent(ctx context.Context, log *slog.Logger) {
	if budgetSpent(ctx) {
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		log.WarnContext(ctx, "asynq will archive this task on a busy lock: enqueue with asynq.MaxRetry(job.MaxRetry)",
			"max_retry", maxRetry)
	}
}

// finishContext keeps ctx's values but not its cancellation, bounded by
// finishTimeout.
func finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
}
