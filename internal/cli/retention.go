package cli

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/workers/execution"
)

// retentionJanitor is the worker's idempotency.Janitor of the job tables:
// each batch deletes final jobs past jobs_retention with their attempt
// ledger and callbacks, and a failed job's archived tasks from the queue,
// and the rows of the audit trail (admin_actions) older than it, then (unless executions are kept forever, executions_retention
// negative) final executions past
// executions_retention and the ledger rows of tasks that ran without a
// job, which have no job to go with.
type retentionJanitor struct {
	jobs       *job.Store
	tasks      job.TaskDeleter
	executions *execution.Store
	jobsFor    time.Duration
	// execFor is executions_retention; negative keeps them forever.
	execFor time.Duration
	metrics *telemetry.RetentionMetrics
}

func newRetentionJanitor(pool *pgxpool.Pool, tasks job.TaskDeleter, cfg *config.Config, m *telemetry.RetentionMetrics) retentionJanitor {
	j := retentionJanitor{jobs: job.NewStore(pool), tasks: tasks, executions: execution.New(pool), jobsFor: cfg.JobsRetention, metrics: m}
	if cfg.ExecutionsRetention != nil {
		j.execFor = *cfg.ExecutionsRetention
	}
	return j
}

// DeleteExpired deletes at most limit rows of each kind and reports the
// largest count, so that idempotency.RunJanitor goes on at once while any
// kind came back full.
func (j retentionJanitor) DeleteExpired(ctx context.Context, limit int) (int, error) {
	most, err := j.jobs.DeleteFinished(ctx, j.jobsFor, limit, j.tasks)
	j.metrics.Deleted("jobs", most)
	if err != nil {
		return 0, err
	}
	// The audit trail of operators' actions is kept as long as jobs are.
	n, err := j.jobs.DeleteOldActions(ctx, j.jobsFor, limit)
	if err != nil {
		return 0, err
	}
	j.metrics.Deleted("admin_actions", n)
	most = max(most, n)
	if j.execFor <= 0 {
		return most, nil
	}
	if n, err = j.executions.DeleteFinished(ctx, j.execFor, limit); err != nil {
		return 0, err
	}
	j.metrics.Deleted("job_executions", n)
	most = max(most, n)
	if n, err = j.executions.DeleteEndedAttempts(ctx, j.execFor, limit); err != nil {
		return 0, err
	}
	j.metrics.Deleted("job_attempts", n)
	return max(most, n), nil
}
