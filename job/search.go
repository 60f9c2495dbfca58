package job

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// ByIdempotencyKey returns at most limit jobs created by a request with
// idempotency key key, of any tenant and route, newest first (index
// jobs_idempotency_key, migration 00022).
func (s *Records) ByIdempotencyKey(ctx context.Context, key string, limit int) ([]Record, error) {
	if !Storable(key) {
		return nil, nil
	}
	return s.search(ctx, "idempotency key", `idempotency_key = $1`, limit, key)
}

// ByBusinessKey returns at most limit jobs on business key key, of any
// tenant, newest first (index jobs_business_key_search, migration 00022).
func (s *Records) ByBusinessKey(ctx context.Context, key string, limit int) ([]Record, error) {
	if !Storable(key) {
		return nil, nil
	}
	return s.search(ctx, "business key", `business_key = $1`, limit, key)
}

// ByPayload returns at most limit jobs created after since whose payload
// holds value at its top-level field field, newest first. The payload has
// no index: the statement reads the range of index jobs_created from now
// back to since and stops at limit matches, so since bounds what one
// search reads.
func (s *Records) ByPayload(ctx context.Context, field, value string, since time.Time, limit int) ([]Record, error) {
	values := []any{value}
	if n, err := json.Number(value).Int64(); err == nil {
		values = append(values, n) // "42" matches the string and the number
	}
	var docs []string
	for _, x := range values {
		doc, err := json.Marshal(map[string]any{field: x})
		if err != nil {
			return nil, fmt.Errorf("job: search by payload: %w", err)
		}
		docs = append(docs, string(doc))
	}
	return s.search(ctx, "payload", `created_at > $1 AND payload @> ANY($2::jsonb[])`, limit, since, docs)
}

// search runs one bounded search: the jobs matching cond, newest first.
func (s *Records) search(ctx context.Context, what, cond string, limit int, args ...any) ([]Record, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+` FROM jobs WHERE `+cond+` ORDER BY created_at DESC, id DESC LIMIT `+fmt.Sprint(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("job: search by %s: %w", what, err)
	}
	defer rows.Close()
	var out []Record
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
