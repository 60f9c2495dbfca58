package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Claim is one claim of a record, from the claim ledger
// (idempotency_claims): Claim writes it in the statement that claims, and
// Complete, Release and MarkUnknown end it in theirs, so the ledger costs
// no commit of its own. A claim whose lease expired is ended as
// "taken_over" by the claim that took the record over; an owner that then
// tries to complete or release is recorded as "refused".
type Claim struct {
	FencingToken int64
	// Instance names the gateway that claimed (WithInstance).
	Instance  string
	ClaimedAt time.Time
	// EndedAt is zero and Outcome "" while the claim holds.
	EndedAt time.Time
	// Outcome: "completed", "released", "unknown", "taken_over", "refused".
	Outcome string
	// Reason says why a claim was released, held or refused.
	Reason string
	// Status is the stored (or refused) answer's status, 0 when none.
	Status int
}

// Claims returns the claims of scope's record, oldest first. Claims of an
// earlier life of the key (before its record expired) may lead the list:
// compare ClaimedAt with the record's CreatedAt.
func (s *Store) Claims(ctx context.Context, scope idempotency.Scope) ([]Claim, error) {
	rows, err := s.pool.Query(ctx, `
SELECT fencing_token, instance, claimed_at, ended_at, coalesce(outcome, ''), coalesce(reason, ''), coalesce(status, 0)
  FROM idempotency_claims
 WHERE tenant = $1 AND route = $2 AND key = $3
 ORDER BY id`, scope.Tenant, scope.Route, scope.Key)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claims: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claim, error) {
		var (
			c     Claim
			ended *time.Time
		)
		err := row.Scan(&c.FencingToken, &c.Instance, &c.ClaimedAt, &ended, &c.Outcome, &c.Reason, &c.Status)
		if ended != nil {
			c.EndedAt = *ended
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: claims: %w", err)
	}
	return out, nil
}
