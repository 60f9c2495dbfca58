package pgstore

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Keys returns at most limit live records of tenant and route whose key
// sorts after after ("" starts at the first), in key order, in state when
// state is not "", and the key to pass as after for the next page ("" when
// this page is the last). It reads the primary key's range of tenant and
// route from after on, so each page costs its own rows however many keys
// the route holds, and paging reaches every key (the console's keys list
// past its most recent ones). Stored bodies are not read.
func (s *Store) Keys(ctx context.Context, tenant, route string, state idempotency.State, after string, limit int) ([]idempotency.Record, string, error) {
	const q = `
SELECT key, fingerprint, state, fencing_token, owner, lease_until,
	coalesce(response_status, 0), response_headers, NULL::bytea, body_omitted, created_at, updated_at, expires_at
FROM idempotency_records
WHERE tenant = $1 AND route = $2 AND key > $3 AND expires_at > now() AND ($4 = '' OR state = $4)
ORDER BY key
LIMIT $5`
	if limit <= 0 {
		return nil, "", nil
	}
	rows, err := s.pool.Query(ctx, q, tenant, route, after, string(state), limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("pgstore: keys: %w", err)
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
			return nil, "", fmt.Errorf("pgstore: keys: %w", err)
		}
		rec, err := r.record(idempotency.Scope{Tenant: tenant, Route: route, Key: key})
		if err != nil {
			return nil, "", fmt.Errorf("pgstore: keys: %w", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("pgstore: keys: %w", err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	return out, out[limit-1].Scope.Key, nil
}
