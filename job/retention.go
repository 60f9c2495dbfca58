package job

import (
	"context"
	"fmt"
	"time"
)

// DefaultRetention is how long a final job is kept, counted from when it
// became final (jobs.finished_at): config's jobs_retention default.
const DefaultRetention = 30 * 24 * time.Hour

// deleteFinishedSQL deletes final jobs past the retention, oldest first,
// with their attempt ledger (job_attempts by job id) and their callbacks
// and callback ledger, in one statement. SKIP LOCKED leaves a row a worker
// or a cancel is writing to it, and two janitors never wait for each
// other. A job whose final-status callback is still being sent stays
// until that ends (delivered or abandoned).
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
    RETURNING j.id
), attempts AS (
    DELETE FROM job_attempts a USING gone g WHERE a.job_id = g.id
), callbacks AS (
    DELETE FROM job_callbacks c USING gone g WHERE c.job_id = g.id
), callback_attempts AS (
    DELETE FROM job_callback_attempts c USING gone g WHERE c.job_id = g.id
)
SELECT count(*) FROM gone`

// DeleteFinished deletes at most limit jobs that have been final for
// longer than retention, oldest first, with their ledger rows, and
// reports how many jobs it deleted. It is the jobs retention's batch
// (an idempotency.Janitor's DeleteExpired, given the retention).
func (s *Records) DeleteFinished(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int
	if err := s.db.QueryRow(ctx, deleteFinishedSQL, retention.Seconds(), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("job: delete finished jobs: %w", err)
	}
	return n, nil
}

// deleteJobSQL deletes one job with its ledger rows (Records.Delete).
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
