package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// DefaultRetention is how long a final job is kept, counted from when it
// became final (jobs.finished_at): config's jobs_retention default.
const DefaultRetention = 30 * 24 * time.Hour

// deleteFinishedSQL deletes final jobs past the retention, oldest first,
// with their attempt ledger (job_attempts by job id) and their callbacks
// and callback ledger, in one statement. SKIP LOCKED leaves a row a worker
// or a cancel is writing to it, and two janitors never wait for each
// other. A job whose final-status callback is still being sent stays
// until that ends (delivered or abandoned). It also deletes the console's
// activity buckets (job_activity) that began before the retention. It
// returns one row per job
// deleted: its id, its queue, whether it had failed, and the fencing
// tokens of its attempts that lost their lock or crashed (each may have
// been taken over by a task of its own, TakeoverTaskID).
const deleteFinishedSQL = `
WITH gone AS (
    DELETE FROM jobs j
     USING (SELECT id FROM jobs
             WHERE finished_at IS NOT NULL AND finished_at <= now() - make_interval(secs => $1)
               AND NOT EXISTS (SELECT 1 FROM job_callbacks c
                                WHERE c.job_id = jobs.id AND c.delivered_at IS NULL AND c.abandoned_at IS NULL)
             ORDER BY finished_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED) d
     WHERE j.id = d.id
    RETURNING j.id, j.queue, j.status, j.debounce_coalesced
), attempts AS (
    DELETE FROM job_attempts a USING gone g WHERE a.job_id = g.id
    RETURNING a.job_id, a.fencing_token, a.outcome
), callbacks AS (
    DELETE FROM job_callbacks c USING gone g WHERE c.job_id = g.id
), callback_attempts AS (
    DELETE FROM job_callback_attempts c USING gone g WHERE c.job_id = g.id
), activity AS (
    DELETE FROM job_activity WHERE at < now() - make_interval(secs => $1)
)
SELECT g.id, g.queue, g.status = 'failed', g.debounce_coalesced,
       COALESCE(array_agg(DISTINCT a.fencing_token) FILTER (
           WHERE a.fencing_token IS NOT NULL AND (a.outcome IS NULL OR a.outcome IN ('lock_lost', 'crashed'))), '{}')
  FROM gone g LEFT JOIN attempts a ON a.job_id = g.id
 GROUP BY g.id, g.queue, g.status, g.debounce_coalesced`

// TaskDeleter deletes a task asynq holds. An *asynq.Inspector is one.
type TaskDeleter interface {
	DeleteTask(queue, id string) error
}

var _ TaskDeleter = (*asynq.Inspector)(nil)

// DeleteFinished deletes at most limit jobs that have been final for
// longer than retention, oldest first, with their ledger rows, and
// reports how many jobs it deleted. It is the jobs retention's batch
// (an idempotency.Janitor's DeleteExpired, given the retention).
//
// With tasks set, it then deletes from the queue the archived tasks of
// the failed jobs it deleted: the job's own and its takeover tasks.
// asynq keeps an archived task, with its payload, for 90 days, longer
// than the job. A task it could not delete is reported in the error,
// with the count of the jobs deleted all the same; the worker refuses to
// run a task whose job is gone (workers' Deps.Jobs). Nil tasks leaves the
// queue alone.
func (s *Store) DeleteFinished(ctx context.Context, retention time.Duration, limit int, tasks TaskDeleter) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	rows, err := s.db.Query(ctx, deleteFinishedSQL, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("job: delete finished jobs: %w", err)
	}
	type archived struct{ queue, id string }
	var n int
	var left []archived
	for rows.Next() {
		var id, queue string
		var failed bool
		var lost []int64
		var coalesced *int
		if err := rows.Scan(&id, &queue, &failed, &coalesced, &lost); err != nil {
			rows.Close()
			return n, fmt.Errorf("job: delete finished jobs: %w", err)
		}
		n++
		if !failed {
			continue // only a failed job's task is archived
		}
		own := Row{ID: id}
		if coalesced != nil {
			own.Debounce = &Debounced{Coalesced: *coalesced}
		}
		left = append(left, archived{queue, TaskID(own)})
		for _, token := range lost {
			left = append(left, archived{queue, TakeoverTaskID(id, token)})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("job: delete finished jobs: %w", err)
	}
	if tasks == nil {
		return n, nil
	}
	var errs []error
	for _, t := range left {
		err := tasks.DeleteTask(t.queue, t.id)
		if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
			errs = append(errs, fmt.Errorf("job: delete the archived task %s of a deleted job: %w", t.id, err))
		}
	}
	return n, errors.Join(errs...)
}

// deleteJobSQL deletes one job with its ledger rows (Store.Delete).
const deleteJobSQL = `
WITH gone AS (
    DELETE FROM jobs WHERE id = $1 RETURNING id
), attempts AS (
    DELETE FROM job_attempts a USING gone g WHERE a.job_id = g.id
), callbacks AS (
    DELETE FROM job_callbacks c USING gone g WHERE c.job_id = g.id
), callback_attempts AS (
    DELETE FROM job_callback_attempts c USING gone g WHERE c.job_id = g.id
)
SELECT count(*) FROM gone`
