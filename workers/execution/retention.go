package execution

import (
	"context"
	"fmt"
	"time"
)

// DefaultRetention is how long a final execution (succeeded, failed or
// cancelled) is
// kept, counted from when it ended: config's executions_retention
// default. An execution is the once-per-business-key promise: a job with
// the same business key that arrives after its execution is deleted runs
// again.
const DefaultRetention = 90 * 24 * time.Hour

// DeleteFinished deletes at most limit executions that ended (succeeded,
// failed or cancelled) more than retention ago, oldest first, and reports how many
// it deleted. An execution in flight is never deleted.
func (s *Store) DeleteFinished(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `
DELETE FROM job_executions e
 USING (SELECT tenant, key FROM job_executions
         WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at <= now() - make_interval(secs => $1)
         ORDER BY finished_at LIMIT $2
         FOR UPDATE SKIP LOCKED) d
 WHERE e.tenant = d.tenant AND e.key = d.key`, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("execution: delete finished executions: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
