package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ByIdempotencyKey returns at most limit jobs created by a request with
// idempotency key key, of any tenant and route, newest first (index
// jobs_idempotency_key, migration 00022).
func (s *Store) ByIdempotencyKey(ctx context.Context, key string, limit int) ([]Row, error) {
	if !Storable(key) {
		return nil, nil
	}
	return s.search(ctx, "idempotency key", `idempotency_key = $1`, limit, key)
}

// ByBusinessKey returns at most limit jobs on business key key, of any
// tenant, newest first (index jobs_business_key_search, migration 00022).
func (s *Store) ByBusinessKey(ctx context.Context, key string, limit int) ([]Row, error) {
	if !Storable(key) {
		return nil, nil
	}
	return s.search(ctx, "business key", `business_key = $1`, limit, key)
}

// PayloadScan bounds ByPayload: it reads at most this many of the newest
// jobs of its window.
const PayloadScan = 20000

// ByPayload returns at most limit jobs created after since whose payload
// holds value at its top-level field field, newest first, and the time
// the search reached back to: since, or later when the window holds more
// than PayloadScan jobs (then only the newest PayloadScan are read). The
// payload has no index: the statement reads the range of index
// jobs_created from now back to that time and stops at limit matches.
func (s *Store) ByPayload(ctx context.Context, field, value string, since time.Time, limit int) ([]Row, time.Time, error) {
	values := []any{value}
	if n, err := json.Number(value).Int64(); err == nil {
		values = append(values, n) // "42" matches the string and the number
	}
	var docs []string
	for _, x := range values {
		doc, err := json.Marshal(map[string]any{field: x})
		if err != nil {
			return nil, since, fmt.Errorf("job: search by payload: %w", err)
		}
		docs = append(docs, string(doc))
	}
	// The PayloadScan-th newest job of the window, when there is one,
	// bounds the read (an index-only range of jobs_created).
	var from time.Time
	err := s.db.QueryRow(ctx, `SELECT created_at FROM jobs WHERE created_at > $1 ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1`,
		since, PayloadScan-1).Scan(&from)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		from = since
	case err != nil:
		return nil, since, fmt.Errorf("job: search by payload: %w", err)
	default:
		from = from.Add(-time.Microsecond) // created_at > from keeps it
	}
	jobs, err := s.search(ctx, "payload", `created_at > $1 AND payload @> ANY($2::jsonb[])`, limit, from, docs)
	return jobs, from, err
}

// search runs one bounded search: the jobs matching cond, newest first.
func (s *Store) search(ctx context.Context, what, cond string, limit int, args ...any) ([]Row, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+` FROM jobs WHERE `+cond+` ORDER BY created_at DESC, id DESC LIMIT `+fmt.Sprint(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("job: search by %s: %w", what, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("job: search by %s: %w", what, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: search by %s: %w", what, err)
	}
	return out, nil
}
