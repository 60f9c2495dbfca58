package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

var _ idempotency.RequestCounter = (*Store)(nil)

// addRequestsSQL adds one batch of counts in one statement. The rows are
// locked in the order batched claims lock them (scopeOrder: bytes, not the
// database's collation), so that two gateways adding counts, or a batch
// of claims, never deadlock with it; a record past its expiry gets none.
const addRequestsSQL = `
WITH c AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
		$7::bigint[], $8::bigint[], $9::timestamptz[], $10::timestamptz[])
		AS c(tenant, route, key, n_new, n_replayed, n_conflict, n_mismatch, n_released, first_at, last_at)
), locked AS (
	SELECT r.tenant, r.route, r.key FROM idempotency_records r
	JOIN c ON r.tenant = c.tenant AND r.route = c.route AND r.key = c.key
	WHERE r.expires_at > now()
	ORDER BY r.tenant COLLATE "C", r.route COLLATE "C", r.key COLLATE "C"
	FOR UPDATE OF r
)
UPDATE idempotency_records r SET
	requests_new      = r.requests_new + c.n_new,
	requests_replayed = r.requests_replayed + c.n_replayed,
	requests_conflict = r.requests_conflict + c.n_conflict,
	requests_mismatch = r.requests_mismatch + c.n_mismatch,
	requests_released = r.requests_released + c.n_released,
	requests_first_at = least(r.requests_first_at, c.first_at),
	requests_last_at  = greatest(r.requests_last_at, c.last_at)
FROM c, locked l
WHERE r.tenant = l.tenant AND r.route = l.route AND r.key = l.key
  AND c.tenant = l.tenant AND c.route = l.route AND c.key = l.key`

// AddRequests implements idempotency.RequestCounter: the counts are
// columns of the record's row (migration 00029), so the janitor and Delete
// remove them with it. One statement adds every count.
func (s *Store) AddRequests(ctx context.Context, counts []idempotency.KeyCount) error {
	if len(counts) == 0 {
		return nil
	}
	// One entry per scope: an UPDATE changes a row once.
	merged := make(map[idempotency.Scope]idempotency.KeyCount, len(counts))
	for _, c := range counts {
		m := merged[c.Scope]
		m.Scope = c.Scope
		m.Add(c)
		merged[c.Scope] = m
	}
	list := make([]idempotency.KeyCount, 0, len(merged))
	for _, c := range merged {
		list = append(list, c)
	}
	n := len(list)
	tenants, routes, keys := make([]string, n), make([]string, n), make([]string, n)
	var kinds [5][]int64
	for i := range kinds {
		kinds[i] = make([]int64, n)
	}
	first, last := make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	for i, c := range list {
		tenants[i], routes[i], keys[i] = c.Scope.Tenant, c.Scope.Route, c.Scope.Key
		kinds[0][i], kinds[1][i], kinds[2][i], kinds[3][i], kinds[4][i] = c.New, c.Replayed, c.Conflict, c.Mismatch, c.Released
		first[i] = pgtype.Timestamptz{Time: c.First, Valid: !c.First.IsZero()}
		last[i] = pgtype.Timestamptz{Time: c.Last, Valid: !c.Last.IsZero()}
	}
	// Not run again on a lost connection, as the other statements are: the
	// batch may have committed, and adding it again would count it twice.
	if _, err := s.pool.Exec(ctx, addRequestsSQL, tenants, routes, keys,
		kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], first, last); err != nil {
		return fmt.Errorf("pgstore: add requests: %d counts dropped: %w", n, err)
	}
	return nil
}

const requestCountsSQL = `
SELECT requests_new, requests_replayed, requests_conflict, requests_mismatch, requests_released,
	requests_first_at, requests_last_at
FROM idempotency_records
WHERE tenant = $1 AND route = $2 AND key = $3 AND expires_at > now()`

// RequestCounts implements idempotency.RequestCounter.
func (s *Store) RequestCounts(ctx context.Context, scope idempotency.Scope) (idempotency.KeyCount, error) {
	var lost int
	for {
		c := idempotency.KeyCount{Scope: scope}
		var first, last pgtype.Timestamptz
		err := s.pool.QueryRow(ctx, requestCountsSQL, scope.Tenant, scope.Route, scope.Key).Scan(
			&c.New, &c.Replayed, &c.Conflict, &c.Mismatch, &c.Released, &first, &last)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return idempotency.KeyCount{}, idempotency.ErrNotFound
		case err != nil:
			if s.retryable(ctx, err, &lost) {
				continue
			}
			return idempotency.KeyCount{}, fmt.Errorf("pgstore: request counts: %w", err)
		}
		if first.Valid {
			c.First = first.Time
		}
		if last.Valid {
			c.Last = last.Time
		}
		return c, nil
	}
}
