package pgstore

import (
	"context"
	"fmt"
	"time"
)

// deleteExpiredSQL deletes oldest first along the expires_at index. SKIP
// LOCKED leaves a row a concurrent claim is taking over to that claim, and
// two janitors never wait for each other. A live lease is never deleted even
// if its expiry says so (Claim and Renew keep expires_at at or after
// lease_until, so that is only a guard).
const deleteExpiredSQL = `
DELETE FROM idempotency_records AS r
USING (
	SELECT tenant, route, key FROM idempotency_records
	WHERE expires_at <= now() AND (state <> 'in_flight' OR lease_until <= now())
	ORDER BY expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
) AS d
WHERE r.tenant = d.tenant AND r.route = d.route AND r.key = d.key`

// DeleteExpired deletes at most limit expired records, oldest first, and
// reports how many it deleted.
func (s *Store) DeleteExpired(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var lost int
	for {
		tag, err := s.pool.Exec(ctx, deleteExpiredSQL, limit)
		if err != nil {
			if s.retryable(ctx, err, &lost) {
				continue
			}
			return 0, fmt.Errorf("pgstore: delete expired: %w", err)
		}
		return int(tag.RowsAffected()), nil
	}
}

// RunJanitor deletes expired records until ctx ends: batches of batch rows
// back to back while a batch comes back full, then a pause of interval. A
// failed batch is logged and tried again after the pause. It returns nil
// when ctx ends, and an error only for a non-positive interval or batch.
// The caller runs it in a goroutine it owns and waits for.
func (s *Store) RunJanitor(ctx context.Context, interval time.Duration, batch int) error {
	if interval <= 0 || batch <= 0 {
		return fmt.Errorf("pgstore: janitor: interval %v and batch %d must be positive", interval, batch)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		for ctx.Err() == nil {
			n, err := s.DeleteExpired(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("pgstore: janitor batch failed", "err", err)
				}
				break
			}
			if n < batch {
				break
			}
		}
		timer.Reset(interval)
	}
}
