package execution

import (
	"context"
	"fmt"
)

// OutcomeLimited: a flow limit (a partner's concurrency or rate) refused
// the delivery; nothing ran, no token was drawn, and the attempt is not
// counted.
const OutcomeLimited Outcome = "limited"

// OutcomePaused: a pause of the job's task, queue or limit key value sent
// the delivery back (job.Pause); nothing ran, no token was drawn, and the
// attempt is not counted.
const OutcomePaused Outcome = "paused"

// RecordLimited adds an ended limited row for a delivery of a that a flow
// limit sent back, numbered with the job's attempts so far (the limited
// delivery does not count); a.Token is ignored, and reason says which
// limit and why. Like RecordBusy, it is a write of its own, on the
// limited path only.
func (s *Store) RecordLimited(ctx context.Context, a Attempt, reason string) error {
	return s.recordNotRun(ctx, a, OutcomeLimited, reason)
}

// RecordPaused is RecordLimited for a delivery a pause sent back; reason
// is the pause's story.
func (s *Store) RecordPaused(ctx context.Context, a Attempt, reason string) error {
	return s.recordNotRun(ctx, a, OutcomePaused, reason)
}

func (s *Store) recordNotRun(ctx context.Context, a Attempt, outcome Outcome, reason string) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, worker, ended_at, outcome, error)
VALUES ($1, $2, $3, $4, $5, `+attemptsSoFar+`, $6, now(), $8, NULLIF($7, ''))`,
		a.JobID, a.Tenant, a.Key, a.Task, a.Resource, a.Worker, clip(reason), string(outcome))
	if err != nil {
		return fmt.Errorf("execution: record %s attempt of %q: %w", outcome, a.Key, err)
	}
	return nil
}
