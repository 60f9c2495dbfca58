package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers"
)

// CheckStuckJobs names StuckJobs: no job stays unfinished, its record
// unchanged, for longer than Options.StuckAfter.
const CheckStuckJobs = "stuck_jobs"

// StuckJobs reports every job that has not finished and whose record has
// not changed for longer than Options.StuckAfter, saying whether the queue
// still holds its task: a job whose task the queue lost never runs, and
// one whose task waits may only be behind a backlog. A scheduled job
// counts from its not_before: waiting for its time is not being stuck,
// and once due it is a queued job like any other. With StuckAfter 0 it
// checks nothing.
func StuckJobs() Check { return Check{Name: CheckStuckJobs, Run: stuckJobs} }

func stuckJobs(ctx context.Context, s *Snapshot) error {
	if s.opts.StuckAfter <= 0 {
		return nil
	}
	// updated_at < cutoff follows from GREATEST(…) < cutoff; said on its
	// own it makes each status a range of jobs_status (status,
	// updated_at), so the check reads the unfinished jobs older than the
	// cutoff, not every unfinished one (tens of thousands in a table of
	// millions). The task is looked up by its TaskID (job.TaskID: a
	// debounced job's changes each send their own).
	const query = `
SELECT id, CASE WHEN debounce_coalesced > 1 THEN id || ':d' || debounce_coalesced ELSE id END AS task_id, tenant, business_key, task, queue, CASE WHEN status = 'scheduled' THEN 'queued' ELSE status END,
       extract(epoch FROM now() - GREATEST(updated_at, not_before))::float8
  FROM jobs
 WHERE status IN ('scheduled', 'queued', 'processing', 'retrying', 'cancelling')
   AND updated_at < now() - make_interval(secs => $1)
   AND GREATEST(updated_at, not_before) < now() - make_interval(secs => $1)
 ORDER BY updated_at, id`
	return s.Scan(ctx, CheckStuckJobs, query, []any{s.opts.StuckAfter.Seconds()}, func(rows pgx.Rows) error {
		var (
			id, taskID, tenant, key, task, queue, status string
			age                                          float64
		)
		if err := rows.Scan(&id, &taskID, &tenant, &key, &task, &queue, &status, &age); err != nil {
			return err
		}
		where := "its task was not looked up"
		if s.opts.TaskState != nil {
			state, err := s.opts.TaskState(ctx, queue, taskID)
			switch {
			case err != nil:
				return fmt.Errorf("task of %s: %w", id, err)
			case state == "":
				where = fmt.Sprintf("its task is missing from queue %s", queue)
			default:
				where = fmt.Sprintf("its task is %s in queue %s", state, queue)
			}
		}
		unchanged := (time.Duration(age * float64(time.Second))).Round(time.Second)
		s.JobViolation(CheckStuckJobs, tenant, key, fmt.Sprintf("%s job %s is %s, unchanged for %s; %s", task, id, status, unchanged, where),
			id, workers.Scope(tenant, key))
		return nil
	})
}
