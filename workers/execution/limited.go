package execution

import (
	"context"
	"fmt"
)

// OutcomeLimited: a flow limit (a partner's concurrency or rate) refused
// the delivery; nothing ran, no token was drawn, and the attempt is not
// counted.
const OutcomeLimited Outcome = "limited"

// RecordLimited adds an ended limited row for a delivery of a that a flow
// limit sent back, numbered with the job's attempts so far (the limited
// delivery does not count); a.Token is ignored, and reason says which
// limit and why. Like RecordBusy, it is a write of its own, on the
// limited path only.
func (s *Store) RecordLimited(ctx context.Context, a Attempt, reason string) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, worker, ended_at, outcome, error)
VALUES ($1, $2, $3, $4, $5, `+attemptsSoFar+`, $6, now(), 'limited', NULLIF($7, ''))`,
		a.JobID, a.Tenant, a.Key, a.Task, a.Resource, a.Worker, clip(reason))
	if err != nil {
		return fmt.Errorf("execution: record limited attempt of %q: %w", a.Key, err)
	}
	return nil
}
