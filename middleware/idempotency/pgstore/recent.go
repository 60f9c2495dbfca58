package pgstore

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// RecentScan bounds Recent: it reads at most this many live records of
// every route, those that expire last, through the expires_at index the
// janitor uses, and keeps those of the tenant and route asked.
const RecentScan = 20000

// Recent returns at most limit live records of tenant and route, the most
// recently written first, in state when state is not "" (the operator
// console's list of keys). A record's expires_at follows its claim or its
// completion by its route's retention, so the records that expire last are
// the recent ones, and the table's expires_at index finds them without an
// index of its own on the hot path's table (a new index there would cost
// every claim). The scan is bounded by RecentScan: a route quiet while
// others are busy may show fewer keys than it has; any of them is still
// found by its key. Stored bodies are not read: the list shows the stored
// status only.
func (s *Store) Recent(ctx context.Context, tenant, route string, state idempotency.State, limit int) ([]idempotency.Record, error) {
	const q = `
SELECT key, fingerprint, state, fencing_token, owner, lease_until,
	coalesce(response_status, 0), response_headers, NULL::bytea, body_omitted, created_at, updated_at, expires_at
FROM (SELECT * FROM idempotency_records WHERE expires_at > now() ORDER BY expires_at DESC LIMIT $5) r
WHERE tenant = $1 AND route = $2 AND ($3 = '' OR state = $3)
ORDER BY updated_at DESC, key
LIMIT $4`
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, q, tenant, route, string(state), limit, RecentScan)
	if err != nil {
		return nil, fmt.Errorf("pgstore: recent: %w", err)
	}
	defer rows.Close()
	var out []idempotency.Record
	for rows.Next() {
		var (
			r   row
			key string
		)
		if err := rows.Scan(&key, &r.rec.Fingerprint, &r.state, &r.rec.FencingToken, &r.rec.Owner, &r.lease,
			&r.status, &r.headers, &r.body, &r.omitted, &r.rec.CreatedAt, &r.rec.UpdatedAt, &r.rec.ExpiresAt); err != nil {
			return nil, fmt.Errorf("pgstore: recent: %w", err)
		}
		rec, err := r.record(idempotency.Scope{Tenant: tenant, Route: route, Key: key})
		if err != nil {
			return nil, fmt.Errorf("pgstore: recent: %w", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: recent: %w", err)
	}
	return out, nil
}
