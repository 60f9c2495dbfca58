package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// deleteExpiredSQL deletes oldest first along the expires_at index. SKIP
// LOCKED leaves a row a concurrent claim is taking over to that claim, and
// two janitors never wait for each other. A live lease is never deleted even
// if its expiry says so (Claim and Renew keep expires_at at or after
// lease_until, so that is only a guard).
//
// The claims of a deleted record (the claim ledger) go with it, in the
// same statement.
const deleteExpiredSQL = `
WITH gone AS (
DELETE FROM idempotency_records AS r
USING (
	SELECT tenant, route, key FROM idempotency_records
	WHERE expires_at <= now() AND (state <> 'in_flight' OR lease_until <= now())
	ORDER BY expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
) AS d
WHERE r.tenant = d.tenant AND r.route = d.route AND r.key = d.key
RETURNING r.tenant, r.route, r.key
), claims AS (
	DELETE FROM idempotency_claims c USING gone g
	WHERE c.tenant = g.tenant AND c.route = g.route AND c.key = g.key
)
SELECT 1 FROM gone`

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

// RunJanitor deletes expired records until ctx ends; see
// idempotency.RunJanitor.
func (s *Store) RunJanitor(ctx context.Context, interval time.Duration, batch int) error {
	return idempotency.RunJanitor(ctx, s, interval, batch, s.log)
}
