package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// jobsBatch is a run of final jobs the jobs growth bench wrote in one
// statement, numbers Lo to Hi, all finished at Finished: what a worker
// leaves of jobs that ended at that moment.
type jobsBatch struct {
	Lo, Hi   int64
	Finished time.Time
}

// jobsFinalSQL writes final jobs $3 to $4 as a worker leaves them: the
// job row, its attempt ledger, its execution, and for every other job the
// delivered callback and its ledger row, all finished at $5. $1 is the
// tenant, $2 the run's key prefix, $6..$8 the statuses succeeded, failed,
// cancelled, $9 and $10 the outcomes transient and permanent, $11..$13 the
// events of the three statuses, $14 the task.
//
// Of the written jobs, every 25th is cancelled, every 10th of the others
// failed after three attempts, and the rest succeeded at the first. Every
// other job has a delivered final-status callback. Every 50th also leaves
// a ledger row of a task enqueued without a job (job id ”), which the
// executions retention deletes.
const jobsFinalSQL = `
WITH g AS (
    SELECT i, $2::text || i AS key, 'job_' || md5($2::text || i) AS id,
        CASE WHEN i % 25 = 24 THEN $8::text WHEN i % 10 = 9 THEN $7::text ELSE $6::text END AS status
      FROM generate_series($3::bigint, $4::bigint) AS i
), j AS (
    INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts,
                      result_ref, last_error, created_at, updated_at, finished_at, callback_for)
    SELECT id, $1, 'orders', key, $14, 'default', 'order-' || key,
           jsonb_build_object('order_id', 'order-' || key, 'amount', 1000 + i % 9000, 'currency', 'EUR',
                              'customer', 'cus_' || substr(md5(key), 1, 14), 'note', 'idembench jobs growth'),
           status, CASE WHEN status = $7 THEN 3 ELSE 1 END,
           CASE WHEN status = $6 THEN 'receipts/' || key END,
           CASE WHEN status = $7 THEN 'upstream answered 503 three times' WHEN status = $8 THEN 'cancelled by the client' END,
           $5::timestamptz - interval '3 s', $5, $5, CASE WHEN i % 2 = 0 THEN $5::timestamptz END
      FROM g
), a AS (
    INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, worker, started_at, ended_at, outcome, error)
    SELECT id, $1, 'order-' || key, $14, 'order-' || key, n, i * 4 + n, 'idembench', $5::timestamptz - interval '1 s', $5,
           CASE WHEN status <> $7 THEN status WHEN n < 3 THEN $9 ELSE $10 END,
           CASE WHEN status = $7 THEN 'upstream answered 503' END
      FROM g, generate_series(1, CASE WHEN status = $7 THEN 3 ELSE 1 END) AS n
), jobless AS (
    INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, worker, started_at, ended_at, outcome)
    SELECT '', '', 'manual-' || key, $14, 'manual-' || key, 1, i * 4, 'idembench', $5::timestamptz - interval '1 s', $5, $6
      FROM g WHERE i % 50 = 0
), e AS (
    INSERT INTO job_executions (tenant, key, task, resource, status, result_ref, attempt_count, fencing_token, last_error,
                                created_at, updated_at, finished_at, payload_sha256)
    SELECT $1, 'order-' || key, $14, 'order-' || key, status, CASE WHEN status = $6 THEN 'receipts/' || key END,
           CASE WHEN status = $7 THEN 3 ELSE 1 END, i * 4 + 3, CASE WHEN status = $7 THEN 'upstream answered 503' END,
           $5::timestamptz - interval '3 s', $5, $5, encode(sha256(key::bytea), 'hex')
      FROM g
), c AS (
    INSERT INTO job_callbacks (job_id, seq, task, event, body, created_at, due_at, attempts, delivered_at, last_status)
    SELECT id, 1, $14, CASE status WHEN $6 THEN $11 WHEN $7 THEN $12 ELSE $13 END,
           '{"type":"job.final","data":{"id":"' || id || '","status":"' || status || '","tenant":"' || $1 || '","result_ref":"receipts/' || key || '"}}',
           $5, $5, 1, $5, 200
      FROM g WHERE i % 2 = 0
)
INSERT INTO job_callback_attempts (job_id, seq, attempt, worker, started_at, ended_at, status, outcome)
SELECT id, 1, 1, 'idembench', $5, $5, 200, 'delivered' FROM g WHERE i % 2 = 0`

// writeFinalJobs writes batch b of final jobs.
func writeFinalJobs(ctx context.Context, pool *pgxpool.Pool, prefix string, b jobsBatch) error {
	_, err := pool.Exec(ctx, jobsFinalSQL, jobsTenant, prefix, b.Lo, b.Hi, b.Finished,
		job.StatusSucceeded, job.StatusFailed, job.StatusCancelled,
		execution.OutcomeTransient, execution.OutcomePermanent,
		job.EventSucceeded, job.EventFailed, job.EventCancelled, jobsTask)
	if err != nil {
		return fmt.Errorf("write jobs %d..%d: %w", b.Lo, b.Hi, err)
	}
	return nil
}

// The tenant and task of every job the bench writes.
const (
	jobsTenant = "bench"
	jobsTask   = "order.fulfil"
)

// jobsKeptSQL writes the rows the janitor must keep however old they are,
// 5×$3 jobs that last changed an hour ago: $3 unfinished jobs of each
// unfinished status ($4..$8), with an attempt still running for those in
// processing and cancelling, and $3 jobs final for an hour whose callback
// is still being sent; plus $3 executions in flight. $1 is the tenant, $2
// the key prefix, $9 the succeeded status, $10 its event, $11 the task.
const jobsKeptSQL = `
WITH s AS (
    SELECT u.status, n, $2::text || 'kept-' || u.status || '-' || n AS key
      FROM unnest(ARRAY[$4::text, $5::text, $6::text, $7::text, $8::text]) AS u(status), generate_series(1, $3::int) AS n
), unfinished AS (
    INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts, created_at, updated_at)
    SELECT 'job_' || md5(key), $1, 'orders', key, $11, 'default', 'order-' || key, '{"order_id":"kept"}',
           status, CASE WHEN status IN ($6, $8) THEN 1 ELSE 0 END, now() - interval '1 hour', now() - interval '1 hour'
      FROM s
), running AS (
    INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, worker, started_at)
    SELECT 'job_' || md5(key), $1, 'order-' || key, $11, 'order-' || key, 1, n, 'idembench', now() - interval '1 hour'
      FROM s WHERE status IN ($6, $8)
), inflight AS (
    INSERT INTO job_executions (tenant, key, task, resource, status, attempt_count, fencing_token, created_at, updated_at)
    SELECT $1, 'order-' || key, $11, 'order-' || key, $6, 1, n, now() - interval '1 hour', now() - interval '1 hour'
      FROM s WHERE status = $6
), p AS (
    SELECT n, $2::text || 'kept-callback-' || n AS key FROM generate_series(1, $3::int) AS n
), pending AS (
    INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload, status, attempts,
                      created_at, updated_at, finished_at, callback_for)
    SELECT 'job_' || md5(key), $1, 'orders', key, $11, 'default', 'order-' || key, '{"order_id":"kept"}',
           $9, 1, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
      FROM p
), pending_attempts AS (
    INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, worker, started_at, ended_at, outcome)
    SELECT 'job_' || md5(key), $1, 'order-' || key, $11, 'order-' || key, 1, n, 'idembench',
           now() - interval '1 hour', now() - interval '1 hour', $9
      FROM p
)
INSERT INTO job_callbacks (job_id, seq, task, event, body, created_at, due_at, attempts, last_status, last_error)
SELECT 'job_' || md5(key), 1, $11, $10, '{"type":"job.final"}', now() - interval '1 hour', now() + interval '1 hour', 3, 503, 'receiver answered 503'
  FROM p`

// jobsKeptEach is the number of rows of each kind jobsKeptSQL writes.
const jobsKeptEach = 20

func writeKeptJobs(ctx context.Context, pool *pgxpool.Pool, prefix string) error {
	_, err := pool.Exec(ctx, jobsKeptSQL, jobsTenant, prefix, jobsKeptEach,
		job.StatusScheduled, job.StatusQueued, job.StatusProcessing, job.StatusRetrying, job.StatusCancelling,
		job.StatusSucceeded, job.EventSucceeded, jobsTask)
	if err != nil {
		return fmt.Errorf("write the jobs to keep: %w", err)
	}
	return nil
}

// jobsCheck is what the janitor left, read once it has stopped.
type jobsCheck struct {
	// Recent is the final jobs written within the retention before the
	// janitor stopped; RecentLeft, how many of them are still there (all).
	Recent     int64 `json:"recent"`
	RecentLeft int64 `json:"recent_left"`
	// Kept is the unfinished jobs, the jobs with a callback in flight and
	// the executions in flight; KeptLeft, how many are still there (all).
	Kept     int64 `json:"kept"`
	KeptLeft int64 `json:"kept_left"`
	// Stale is the final jobs (and executions) older than the retention
	// plus two janitor intervals still there: the janitor's lag (0 when it
	// keeps up); the pending callbacks' jobs are not counted.
	StaleJobs       int64 `json:"stale_jobs"`
	StaleExecutions int64 `json:"stale_executions"`
	// Orphans is the ledger and callback rows whose job is gone, and
	// Missing the attempt rows the remaining jobs count but lack (both 0:
	// a job's rows go with it, and only with it).
	Orphans int64 `json:"orphans"`
	Missing int64 `json:"missing"`
}

// problems lists what the janitor got wrong.
func (c jobsCheck) problems() []string {
	var out []string
	if c.RecentLeft != c.Recent {
		out = append(out, fmt.Sprintf("jobs: %d of the %d final jobs within the retention were deleted", c.Recent-c.RecentLeft, c.Recent))
	}
	if c.KeptLeft != c.Kept {
		out = append(out, fmt.Sprintf("jobs: %d of the %d unfinished jobs, jobs with a callback in flight and executions in flight were deleted", c.Kept-c.KeptLeft, c.Kept))
	}
	if c.Orphans != 0 || c.Missing != 0 {
		out = append(out, fmt.Sprintf("jobs: %d ledger or callback rows outlived their job, %d attempt rows of remaining jobs are missing", c.Orphans, c.Missing))
	}
	return out
}

// checkJobs reads what the janitor, stopped by now, left of batches and
// of the rows jobsKeptSQL wrote, as the rows the janitor must keep.
//
// Both sides of the check are read on one clock, the database's: the
// janitor deletes a job finished at f once its transaction's now() -
// retention >= f, and every janitor transaction began before this read's
// clock_timestamp(), so a job finished after clock_timestamp() - retention
// must still be there. Which jobs those are is decided from the
// finished_at values as stored, the same ones the janitor compared.
func checkJobs(ctx context.Context, pool *pgxpool.Pool, prefix string, batches []jobsBatch, retention, interval time.Duration) (jobsCheck, error) {
	c := jobsCheck{Kept: 7 * jobsKeptEach}
	lo, hi, finished := make([]int64, len(batches)), make([]int64, len(batches)), make([]time.Time, len(batches))
	for i, b := range batches {
		lo[i], hi[i], finished[i] = b.Lo, b.Hi, b.Finished
	}
	err := pool.QueryRow(ctx, `
WITH since AS (SELECT clock_timestamp() - $3::interval AS t),
recent AS (
    SELECT b.lo, b.hi FROM unnest($6::bigint[], $7::bigint[], $8::timestamptz[]) AS b(lo, hi, finished), since
     WHERE b.finished > since.t
)
SELECT (SELECT coalesce(sum(hi - lo + 1), 0) FROM recent),
       (SELECT count(*) FROM recent, generate_series(recent.lo, recent.hi) AS i, jobs j
         WHERE j.tenant = $9 AND j.route = 'orders' AND j.idempotency_key = $1::text || i),
       (SELECT count(*) FROM jobs WHERE idempotency_key LIKE $1 || 'kept-%')
     + (SELECT count(*) FROM job_executions WHERE status = $2),
       (SELECT count(*) FROM jobs, since WHERE finished_at < since.t - $4::interval AND idempotency_key NOT LIKE $1 || 'kept-%'),
       (SELECT count(*) FROM job_executions, since WHERE status = ANY($5::text[]) AND finished_at < since.t - $4::interval),
       (SELECT count(*) FROM job_attempts a WHERE a.job_id <> '' AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = a.job_id))
     + (SELECT count(*) FROM job_callbacks c WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id))
     + (SELECT count(*) FROM job_callback_attempts c WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id)),
       (SELECT coalesce(sum(attempts), 0) FROM jobs) - (SELECT count(*) FROM job_attempts WHERE job_id <> '')`,
		prefix, job.StatusProcessing, retention, 2*interval,
		[]string{string(job.StatusSucceeded), string(job.StatusFailed), string(job.StatusCancelled)},
		lo, hi, finished, jobsTenant).
		Scan(&c.Recent, &c.RecentLeft, &c.KeptLeft, &c.StaleJobs, &c.StaleExecutions, &c.Orphans, &c.Missing)
	if err != nil {
		return c, fmt.Errorf("check the jobs tables: %w", err)
	}
	return c, nil
}
