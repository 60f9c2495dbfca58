package execution

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/fence"
)

var (
	// ErrNotFound: no job has that key.
	ErrNotFound = errors.New("execution: no such job")
	// ErrSucceeded: the job has already succeeded and will not run again.
	ErrSucceeded = errors.New("execution: job already succeeded")
	// ErrNotProcessing: the job is not in a state the change applies to.
	ErrNotProcessing = errors.New("execution: job is not processing")
	// ErrConflict: the business key has succeeded, or is being processed,
	// with another payload. The first payload decides a key's effect; a
	// different one under the same key is a client error, not a replay.
	ErrConflict = errors.New("execution: business key taken by another payload")
	// ErrCancelled: the job's record (the jobs row of Attempt.JobID) is
	// cancelled or being cancelled, so no attempt may start. The delivery
	// is acked: it does nothing.
	ErrCancelled = errors.New("execution: job cancelled")
	// ErrNoJob: the attempt requires its job's record (Attempt.JobRecorded)
	// and the jobs row of Attempt.JobID is gone: the jobs retention or an
	// operator deleted it. Nothing starts and nothing is written.
	ErrNoJob = errors.New("execution: the job's record is gone")
	// ErrSuperseded: the attempt's task carries a version of a debounced
	// job (Attempt.Debounce) that a later submit replaced: the task of
	// that submit runs the job. Nothing starts and nothing is written.
	ErrSuperseded = errors.New("execution: the task is superseded by a later submit of its debounced job")
)

// maxErrorLen bounds the stored last_error; a cause longer than this is an
// accident (a whole response body) and is cut.
const maxErrorLen = 2048

// State is one job's execution state.
type State struct {
	// Tenant and Key identify the job: business keys are scoped to the
	// tenant that submitted them. Tasks enqueued without a tenant have "".
	Tenant       string
	Key          string
	Task         string
	Resource     string
	Status       job.Status
	ResultRef    string
	Attempts     int
	FencingToken int64
	LastError    string
	// PayloadSHA256 is the hash of the canonical payload that took the key,
	// "" for rows written before payloads were compared.
	PayloadSHA256 string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// FinishedAt is zero until the job succeeds or fails.
	FinishedAt time.Time
}

// Attempt is an attempt that has taken the job's resource lock and drawn
// its fencing token.
type Attempt struct {
	Tenant   string
	Key      string
	Task     string
	Resource string
	Token    int64
	// PayloadSHA256, when set, is compared with the hash recorded for the
	// key: a succeeded or processing job with another payload refuses the
	// attempt with ErrConflict; a failed one is taken over by the new
	// payload (a corrected request after a refusal).
	PayloadSHA256 string
	// JobID and Worker go to the attempt's ledger row (job_attempts): the
	// job the attempt ran for (its asynq task id) and the worker that ran
	// it. Both optional.
	JobID  string
	Worker string
	// JobRecorded says that JobID names a jobs row that must exist: the
	// task came from a submitted job. Take refuses the attempt with
	// ErrNoJob when the row is gone, so a task that outlived its job (one
	// replayed from asynq's archive after the jobs retention) never runs.
	JobRecorded bool
	// Debounce is the version of a debounced job the task carries
	// (job.HeaderDebounce); 0 for any other task. Take refuses the
	// attempt with ErrSuperseded when the job's row holds another.
	Debounce int
	// FlushLater lets Take's commit return before its WAL flush. It is
	// safe only when the token reaches nothing outside the database
	// before a synchronous commit that follows the take: PostgreSQL
	// flushes its WAL in order, so that commit makes the take durable
	// too, and a take lost in a crash before it lost only what its token
	// never touched (a token drawn again after a restart is higher: the
	// clock floor). A token that leaves first (an HTTP delivery, a call to
	// a partner) needs the flush, and a Store without batching always
	// waits for it.
	FlushLater bool
}

// DB is the part of a PostgreSQL handle the store uses. *pgxpool.Pool,
// *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes job_executions.
type Store struct {
	db    DB
	batch *committer // nil: every write is its own round trip and commit
}

// New returns a Store on db.
func New(db DB, opts ...Option) *Store {
	s := &Store{db: db}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// queryRow runs a statement returning one row and hands the row to scan:
// in a batch shared with other callers when batching is on (order is the
// job the statement writes, which sorts the batch), on its own otherwise.
func (s *Store) queryRow(ctx context.Context, order, sql string, scan func(pgx.Row) error, args ...any) error {
	return s.write(ctx, order, false, sql, scan, args...)
}

// write is queryRow whose commit, when flushLater, does not wait for its
// WAL flush (Attempt.FlushLater); only a batching Store can say so.
func (s *Store) write(ctx context.Context, order string, flushLater bool, sql string, scan func(pgx.Row) error, args ...any) error {
	if s.batch == nil {
		return scan(s.db.QueryRow(ctx, sql, args...))
	}
	return s.batch.do(&write{ctx: ctx, sql: sql, args: args, order: order, scan: scan, flushLater: flushLater})
}

// jobOrder is the sort key of a job's row in a batch.
func jobOrder(tenant, key string) string { return tenant + "\x00" + key }

const columns = `tenant, key, task, resource, status, coalesce(result_ref, ''), attempt_count,
	fencing_token, coalesce(last_error, ''), coalesce(payload_sha256, ''), created_at, updated_at, finished_at`

func scan(row pgx.Row) (State, error) {
	var (
		r        State
		finished *time.Time
	)
	err := row.Scan(&r.Tenant, &r.Key, &r.Task, &r.Resource, &r.Status, &r.ResultRef, &r.Attempts,
		&r.FencingToken, &r.LastError, &r.PayloadSHA256, &r.CreatedAt, &r.UpdatedAt, &finished)
	if finished != nil {
		r.FinishedAt = *finished
	}
	return r, err
}

// Get returns the record of tenant's job key, or an error wrapping
// ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, key string) (State, error) {
	r, err := scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM job_executions WHERE tenant = $1 AND key = $2`, tenant, key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return State{}, fmt.Errorf("execution: get %q: %w", key, ErrNotFound)
	case err != nil:
		return State{}, fmt.Errorf("execution: get %q: %w", key, err)
	}
	return r, nil
}

// markProcessing ends the insert of MarkProcessing and Take: a new row is
// attempt 1; an existing one counts one more attempt under the newer token,
// unless the job has succeeded, the token is not newer, or another payload
// holds the key (a failed or cancelled job may be taken over by a new
// payload, and starts again from attempt 1).
const markProcessing = `
ON CONFLICT (tenant, key) DO UPDATE SET
    task          = excluded.task,
    resource      = excluded.resource,
    status        = 'processing',
    attempt_count = CASE WHEN e.status IN ('failed', 'cancelled') THEN 1 ELSE e.attempt_count + 1 END,
    fencing_token = excluded.fencing_token,
    last_error    = CASE WHEN e.status IN ('failed', 'cancelled') THEN NULL ELSE e.last_error END,
    result_ref    = NULL,
    payload_sha256 = COALESCE(excluded.payload_sha256, e.payload_sha256),
    finished_at   = NULL,
    updated_at    = now()
WHERE e.status <> 'succeeded'
  AND (e.fencing_token < excluded.fencing_token OR e.resource <> excluded.resource)
  AND (e.status IN ('failed', 'cancelled') OR e.payload_sha256 IS NULL OR excluded.payload_sha256 IS NULL
       OR e.payload_sha256 = excluded.payload_sha256)
RETURNING e.*`

// ledgerTake follows the taking insert (the CTE "taken") in the same
// statement: the attempts of the key that never ended are marked crashed,
// the new attempt gets its ledger row, and the statement returns the
// execution record. $6 is the job id, $7 the worker.
const ledgerTake = `
), crashed AS (
    UPDATE job_attempts a SET outcome = 'crashed', ended_at = now()
      FROM taken t
     WHERE a.tenant = t.tenant AND a.key = t.key AND a.outcome IS NULL AND a.fencing_token < t.fencing_token
), attempt AS (
    INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, worker)
    SELECT $6::text, t.tenant, t.key, t.task, t.resource, t.attempt_count, t.fencing_token, $7::text FROM taken t
)
SELECT ` + columns + ` FROM taken`

// MarkProcessing makes attempt a the job's owner in one statement: it creates the
// row (attempt 1) or counts one more attempt and records a's token. It
// refuses a job that has succeeded (the record and an error wrapping
// ErrSucceeded) and an attempt whose token is not newer than the one already
// recorded for the same resource (a *fence.StaleTokenError: a newer attempt
// owns the job), and one whose payload differs from the key's (ErrConflict,
// with the record). A failed job starts again from attempt 1.
func (s *Store) MarkProcessing(ctx context.Context, a Attempt) (State, error) {
	const query = `
WITH taken AS (
INSERT INTO job_executions AS e (tenant, key, task, resource, status, attempt_count, fencing_token, payload_sha256)
SELECT $1::text, $2::text, $3::text, $4::text, 'processing', 1, $5::bigint, NULLIF($8::text, '')
` + markProcessing + ledgerTake
	r, err := scan(s.db.QueryRow(ctx, query, a.Tenant, a.Key, a.Task, a.Resource, a.Token, a.JobID, a.Worker, a.PayloadSHA256))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("execution: mark %q processing: %w", a.Key, err)
	}
	return s.refused(ctx, "mark processing", a, a.Token)
}

// refused explains why an attempt could not take the job: it has
// succeeded, another payload holds it, or a newer token owns it.
func (s *Store) refused(ctx context.Context, op string, a Attempt, token int64) (State, error) {
	cur, err := s.Get(ctx, a.Tenant, a.Key)
	if err != nil {
		return State{}, fmt.Errorf("execution: %s %q: %w", op, a.Key, err)
	}
	switch {
	case Conflicts(cur, a.PayloadSHA256):
		return cur, fmt.Errorf("execution: %s %q: %w", op, a.Key, ErrConflict)
	case cur.Status == job.StatusSucceeded:
		return cur, fmt.Errorf("execution: %s %q: %w", op, a.Key, ErrSucceeded)
	}
	return cur, fmt.Errorf("execution: %s %q: %w", op, a.Key, fence.Stale(cur.Resource, token, cur.FencingToken))
}

// Conflicts reports whether a job with payload hash sha may not use rec's
// key: the key has succeeded or is processing under another payload (a
// failed or cancelled one is released). Rows without a hash, and attempts
// without one, never conflict.
func Conflicts(rec State, sha string) bool {
	return rec.Status != job.StatusFailed && rec.Status != job.StatusCancelled && rec.PayloadSHA256 != "" && sha != "" && rec.PayloadSHA256 != sha
}

// Take draws the next fencing token for a.Resource (fence.Next) and marks
// the job processing under it (MarkProcessing), in one statement: one round
// trip and one commit instead of two. a.Token is ignored; the token drawn is
// the returned record's FencingToken. Being the resource's newest token, it
// is refused only for a job that has succeeded (ErrSucceeded, with the
// record). A token drawn for a refused attempt is spent: tokens only need
// to increase, not to be consecutive.
//
// When a.JobID names a job record (the jobs row a submitted job has), the
// same statement locks that row first and, once the job is taken, moves a
// scheduled, queued or retrying job to processing with the attempt's
// number, so the job document shows the start in the take's own commit;
// a cancel (job.Store.Cancel, which locks
// the row too) either commits before the take and finds it refused, or
// waits and finds the job processing. A job cancelled or being cancelled
// is refused with ErrCancelled, and nothing starts: no token is drawn, the
// key's execution row is released ('cancelled', as a failed job releases
// it), the attempts a crash left open end as cancelled, and the refused
// delivery gets a ledger row of its own (no token) saying so. A task with
// no job record is taken as before, unless a.JobRecorded says it must
// have one: then it is refused with ErrNoJob, and nothing is written (no
// token, no execution row, no ledger row that would outlive the job).
// Likewise a task of a debounced job that a later submit changed
// (a.Debounce is not the row's debounce_coalesced) is refused with
// ErrSuperseded: the job is not taken, so it keeps waiting for the task
// of its latest version.
func (s *Store) Take(ctx context.Context, a Attempt) (State, error) {
	query := `
WITH job AS (
    SELECT status, debounce_coalesced FROM jobs WHERE id = $6::text FOR UPDATE
), gate AS (
    SELECT NOT EXISTS (SELECT 1 FROM job WHERE status IN ('cancelling', 'cancelled')) AS ok,
           $8::boolean AND NOT EXISTS (SELECT 1 FROM job) AS gone,
           $9::integer > 0 AND EXISTS (SELECT 1 FROM job WHERE debounce_coalesced IS DISTINCT FROM $9::integer) AS superseded
), released AS (
    UPDATE job_executions SET status = 'cancelled', finished_at = now(), updated_at = now()
     WHERE tenant = $2 AND key = $3 AND status = 'processing' AND NOT (SELECT ok FROM gate)
       AND (payload_sha256 IS NULL OR $5 = '' OR payload_sha256 = $5)
), stopped AS (
    UPDATE job_attempts SET outcome = 'cancelled', ended_at = now(), error = '` + errStopped + `'
     WHERE tenant = $2 AND key = $3 AND outcome IS NULL AND NOT (SELECT ok FROM gate)
), refusal AS (
    INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, worker, outcome, ended_at, error)
    SELECT $6::text, $2, $3, $4, $1, 0, $7::text, 'cancelled', now(), '` + errRefused + `' FROM gate WHERE NOT gate.ok
), next AS (` + fence.NextStatementIf("(SELECT ok AND NOT gone AND NOT superseded FROM gate)") + `
), taken AS (
INSERT INTO job_executions AS e (tenant, key, task, resource, status, attempt_count, fencing_token, payload_sha256)
SELECT $2, $3, $4, $1, 'processing', 1, next.token, NULLIF($5, '') FROM next
` + markProcessing + `
), doc AS (
    UPDATE jobs j SET status     = CASE WHEN j.status IN ('scheduled', 'queued', 'retrying') THEN 'processing' ELSE j.status END,
                      attempts   = GREATEST(j.attempts, t.attempt_count),
                      updated_at = now()
      FROM taken t
     WHERE j.id = $6::text` + ledgerTake + `
UNION ALL
SELECT $2, $3, $4, $1, 'cancelled', '', 0, 0::bigint, '', '', now(), now(), NULL::timestamptz FROM gate WHERE NOT gate.ok
UNION ALL
SELECT $2, $3, $4, $1, '', '', 0, 0::bigint, '', '', now(), now(), NULL::timestamptz FROM gate WHERE gate.gone
UNION ALL
SELECT $2, $3, $4, $1, 'superseded', '', 0, 0::bigint, '', '', now(), now(), NULL::timestamptz FROM gate WHERE gate.ok AND gate.superseded`
	var r State
	err := s.write(ctx, jobOrder(a.Tenant, a.Key), a.FlushLater, query, func(row pgx.Row) error {
		var err error
		r, err = scan(row)
		return err
	}, a.Resource, a.Tenant, a.Key, a.Task, a.PayloadSHA256, a.JobID, a.Worker, a.JobRecorded, a.Debounce)
	switch {
	case err == nil && r.FencingToken == 0 && r.Status == "":
		return State{}, fmt.Errorf("execution: take %q: job %s: %w", a.Key, a.JobID, ErrNoJob)
	case err == nil && r.FencingToken == 0 && r.Status == superseded:
		return State{}, fmt.Errorf("execution: take %q: job %s: %w", a.Key, a.JobID, ErrSuperseded)
	case err == nil && r.FencingToken == 0:
		return r, fmt.Errorf("execution: take %q: %w", a.Key, ErrCancelled)
	case err == nil:
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("execution: take %q: %w", a.Key, err)
	}
	// Only a token issued outside the fence (a hand-written row) can be
	// older than the one recorded.
	return s.refused(ctx, "take", a, 0)
}

// superseded is the status of the row Take answers for a superseded
// task: no execution has it.
const superseded = "superseded"

// The ledger's errors of a take refused because the job was cancelled:
// errStopped ends an attempt a crash left open (its effect unknown, as
// for any crash), errRefused is the refused delivery's own row.
const (
	errStopped = CancelledStopped + ": the attempt never recorded its end"
	errRefused = CancelledBefore
)

// ledgerEnd runs a Mark* update (the CTE "done", returning the row it
// changed) and, in the same statement, ends the attempt's ledger row with
// its outcome ($5) and error ($6). It returns how many executions changed.
func ledgerEnd(update string) string {
	return `
WITH done AS (` + update + `
    RETURNING tenant, key, fencing_token
), ended AS (
    UPDATE job_attempts a SET outcome = $5::text, ended_at = now(), error = NULLIF($6::text, '')
      FROM done d
     WHERE a.tenant = d.tenant AND a.key = d.key AND a.fencing_token = d.fencing_token
)
SELECT count(*) FROM done`
}

var (
	markRetryingSQL = ledgerEnd(`
UPDATE job_executions SET last_error = $4, updated_at = now()
 WHERE tenant = $1 AND key = $2 AND fencing_token = $3 AND status = 'processing'`)
	markFailedSQL = ledgerEnd(`
UPDATE job_executions
   SET status = 'failed', last_error = $4, finished_at = now(), updated_at = now()
 WHERE tenant = $1 AND key = $2 AND fencing_token = $3 AND status = 'processing'`)
)

// markUnavailableSQL gives an attempt back: the execution's count goes
// down by one, the attempt's ledger row ends, and the job's document (the
// jobs row the ledger names, while it runs) shows the count the execution
// now has, in one statement, so the two never disagree. The job's count
// is otherwise only ever raised (GREATEST), which kept the given-back
// attempt in it.
const markUnavailableSQL = `
WITH done AS (
    UPDATE job_executions
       SET last_error = $4, attempt_count = GREATEST(attempt_count - 1, 0), updated_at = now()
     WHERE tenant = $1 AND key = $2 AND fencing_token = $3 AND status = 'processing'
    RETURNING tenant, key, fencing_token, attempt_count
), ended AS (
    UPDATE job_attempts a SET outcome = $5::text, ended_at = now(), error = NULLIF($6::text, '')
      FROM done d
     WHERE a.tenant = d.tenant AND a.key = d.key AND a.fencing_token = d.fencing_token
    RETURNING a.job_id, d.attempt_count
), doc AS (
    UPDATE jobs j SET attempts = e.attempt_count
      FROM ended e
     WHERE j.id = e.job_id AND e.job_id <> '' AND j.status NOT IN ('succeeded', 'failed', 'cancelled')
)
SELECT count(*) FROM done`

// markSucceededSQL records a success: the execution, the attempt's ledger
// row and the job's document (the jobs row the ledger names, if there is
// one) in one statement, so one commit. The job document moves as
// job.Store.SetStatus would move it: a cancelling job ends succeeded
// (its attempt did the effect), a succeeded or cancelled one stays.
const markSucceededSQL = `
WITH done AS (
    UPDATE job_executions
       SET status = 'succeeded', result_ref = $4, last_error = NULL, finished_at = now(), updated_at = now()
     WHERE tenant = $1 AND key = $2 AND fencing_token = $3 AND status = 'processing'
    RETURNING tenant, key, fencing_token, attempt_count
), ended AS (
    UPDATE job_attempts a SET outcome = $5::text, ended_at = now(), error = NULLIF($6::text, '')
      FROM done d
     WHERE a.tenant = d.tenant AND a.key = d.key AND a.fencing_token = d.fencing_token
    RETURNING a.job_id, d.attempt_count
), doc AS (
    UPDATE jobs j
       SET status = 'succeeded', attempts = GREATEST(j.attempts, e.attempt_count),
           result_ref = COALESCE(NULLIF($4, ''), j.result_ref), last_error = NULL,
           finished_at = COALESCE(j.finished_at, now()), updated_at = now()
      FROM ended e
     WHERE j.id = e.job_id AND e.job_id <> '' AND j.status NOT IN ('succeeded', 'cancelled')
)
SELECT count(*) FROM done`

// markCancelledSQL ends the attempt a cancel stopped. Like a failed job, a
// cancelled one releases its business key (see markProcessing).
var markCancelledSQL = ledgerEnd(`
UPDATE job_executions
   SET status = 'cancelled', last_error = $4, finished_at = now(), updated_at = now()
 WHERE tenant = $1 AND key = $2 AND fencing_token = $3 AND status = 'processing'`)

// mark runs one of the Mark* statements and reports how many rows it
// changed.
func (s *Store) mark(ctx context.Context, query, tenant, key string, token int64, value string, outcome Outcome, ledgerErr string) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, query, tenant, key, token, value, string(outcome), ledgerErr).Scan(&n)
	return n, err
}

// MarkSucceeded records the job's result, if the attempt holding token
// still owns it. It is the last write of a job: the task is acked after it.
// Called again by the same attempt it does nothing. The attempt's ledger
// row ends as succeeded, and the job's document (the jobs row of the
// attempt's job id, when it has one) shows succeeded with resultRef, all
// in one statement.
func (s *Store) MarkSucceeded(ctx context.Context, tenant, key string, token int64, resultRef string) error {
	var n int64
	resultRef = job.StorableText(resultRef)
	err := s.queryRow(ctx, jobOrder(tenant, key), markSucceededSQL, func(row pgx.Row) error { return row.Scan(&n) },
		tenant, key, token, resultRef, string(OutcomeSucceeded), "")
	return s.marked(ctx, "succeeded", tenant, key, token, job.StatusSucceeded, n, err)
}

// CompleteTx is MarkSucceeded in tx, a transaction of the caller's: the
// business function's own, so that its effect and the record of its
// success commit together or not at all (River's JobCompleteTx). Nothing
// is recorded until tx commits. The statement locks the job's execution
// row until then, so a newer attempt's Take waits for the commit and
// finds the job succeeded, or the call finds the newer token and returns a
// *fence.StaleTokenError: roll tx back on any error.
func CompleteTx(ctx context.Context, tx DB, tenant, key string, token int64, resultRef string) error {
	var n int64
	err := tx.QueryRow(ctx, markSucceededSQL, tenant, key, token, job.StorableText(resultRef),
		string(OutcomeSucceeded), "").Scan(&n)
	return (&Store{db: tx}).marked(ctx, "succeeded", tenant, key, token, job.StatusSucceeded, n, err)
}

// MarkRetrying records the transient error an attempt ended with; the
// attempt stays counted and the job stays processing until the next one.
// The ledger row ends as transient.
func (s *Store) MarkRetrying(ctx context.Context, tenant, key string, token int64, lastErr string) error {
	lastErr = clip(lastErr)
	n, err := s.mark(ctx, markRetryingSQL, tenant, key, token, lastErr, OutcomeTransient, lastErr)
	return s.marked(ctx, "retrying", tenant, key, token, job.StatusProcessing, n, err)
}

// MarkUnavailable records the error of an attempt that found a dependency
// unavailable and gives the attempt back: attempt_count goes down by one in
// the same statement, so the count keeps meaning real attempts (the ones
// that could reach a verdict) and a dependency's outage, however long,
// never uses up the job's attempts. Giving the attempt back, rather than
// keeping a second counter, leaves every reader of attempt_count right as
// it is, and an attempt that dies before this write (a crash) stays
// counted, which errs toward dead-lettering, never toward retrying forever.
// A job whose every attempt so far found its dependency down has 0. The
// job stays processing until the next attempt. The ledger row ends as
// unavailable.
func (s *Store) MarkUnavailable(ctx context.Context, tenant, key string, token int64, lastErr string) error {
	lastErr = clip(lastErr)
	n, err := s.mark(ctx, markUnavailableSQL, tenant, key, token, lastErr, OutcomeUnavailable, lastErr)
	return s.marked(ctx, "unavailable", tenant, key, token, job.StatusProcessing, n, err)
}

// MarkFailed records that the job has failed for good: a permanent error,
// or no attempts left. The ledger row ends as permanent; MarkExhausted
// says how the last attempt ended when the attempts ran out.
func (s *Store) MarkFailed(ctx context.Context, tenant, key string, token int64, lastErr string) error {
	return s.MarkExhausted(ctx, tenant, key, token, OutcomePermanent, lastErr)
}

// MarkExhausted is MarkFailed for a job whose last attempt ended with
// outcome (OutcomeTransient, OutcomeUnavailable) and left no attempt: the
// job fails, and the ledger keeps what the attempt itself met.
func (s *Store) MarkExhausted(ctx context.Context, tenant, key string, token int64, outcome Outcome, lastErr string) error {
	lastErr = clip(lastErr)
	n, err := s.mark(ctx, markFailedSQL, tenant, key, token, lastErr, outcome, lastErr)
	return s.marked(ctx, "failed", tenant, key, token, job.StatusFailed, n, err)
}

// MarkCancelled records that the job was cancelled while the attempt
// holding token ran, and that the attempt did not succeed: the execution
// ends cancelled (its key released, as a failed job's is) and the
// attempt's ledger row ends as cancelled with lastErr, which says how the
// attempt ended (context cancelled, fenced out, no answer).
func (s *Store) MarkCancelled(ctx context.Context, tenant, key string, token int64, lastErr string) error {
	lastErr = clip(lastErr)
	n, err := s.mark(ctx, markCancelledSQL, tenant, key, token, lastErr, OutcomeCancelled, lastErr)
	return s.marked(ctx, "cancelled", tenant, key, token, job.StatusCancelled, n, err)
}

// marked explains a conditional update that touched no row.
func (s *Store) marked(ctx context.Context, op, tenant, key string, token int64, want job.Status, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("execution: mark %q %s: %w", key, op, err)
	}
	if n == 1 {
		return nil
	}
	cur, err := s.Get(ctx, tenant, key)
	switch {
	case err != nil:
		return fmt.Errorf("execution: mark %q %s: %w", key, op, err)
	case cur.FencingToken != token:
		return fmt.Errorf("execution: mark %q %s: %w", key, op, fence.Stale(cur.Resource, token, cur.FencingToken))
	case cur.Status == want:
		return nil
	case cur.Status == job.StatusSucceeded:
		return fmt.Errorf("execution: mark %q %s: %w", key, op, ErrSucceeded)
	}
	return fmt.Errorf("execution: mark %q %s: %w (it is %s)", key, op, ErrNotProcessing, cur.Status)
}

// clip keeps a stored error short and valid UTF-8.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxErrorLen {
		return s
	}
	cut := maxErrorLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// completeOrRefuseSQL is markSucceededSQL that refuses in the server: when
// no execution changed (a newer token owns the job, or it left
// processing), job_complete_refused (migration 00030) raises SQLSTATE
// refusedCode and aborts the transaction, so that a COMMIT sent behind it
// in the same round trip rolls back instead.
var completeOrRefuseSQL = strings.Replace(markSucceededSQL, "SELECT count(*) FROM done",
	"SELECT CASE WHEN count(*) = 0 THEN job_complete_refused($1, $2, $3) ELSE count(*) END FROM done", 1)

// genericPlansSQL gives the completion its generic plan at once, as
// batchSettingsSQL does a batch's statements.
const genericPlansSQL = `SELECT ` + genericPlans

// refusedCode is the SQLSTATE of job_complete_refused.
const refusedCode = "IG001"

// Conn is a connection holding an open transaction: *pgx.Conn satisfies
// it.
type Conn interface {
	DB
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// CompleteAndCommit is CompleteTx followed by COMMIT, in one round trip
// (behind genericPlansSQL), on conn, which holds the transaction that wrote the job's effect: the
// effect and the record of its success commit together, or neither does.
// When the attempt no longer owns the job the server refuses the
// completion, the transaction is rolled back, and the error is
// CompleteTx's (a *fence.StaleTokenError, ErrSucceeded, ErrNotProcessing).
// Any other error leaves the outcome to the caller: the connection may
// have been lost after the commit reached the server, and it must not be
// used again.
func CompleteAndCommit(ctx context.Context, conn Conn, tenant, key string, token int64, resultRef string) error {
	var b pgx.Batch
	var n int64
	b.Queue(genericPlansSQL)
	b.Queue(completeOrRefuseSQL, tenant, key, token, job.StorableText(resultRef), string(OutcomeSucceeded), "").
		QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	b.Queue("COMMIT")
	err := conn.SendBatch(ctx, &b).Close()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != refusedCode {
		if err != nil {
			return fmt.Errorf("execution: complete %q and commit: %w", key, err)
		}
		return nil
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		return fmt.Errorf("execution: complete %q: refused, then rollback: %w", key, err)
	}
	return (&Store{db: conn}).marked(ctx, "succeeded", tenant, key, token, job.StatusSucceeded, 0, nil)
}
