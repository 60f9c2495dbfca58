package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

var _ idempotency.RequestCounter = (*Store)(nil)

// AddRequests implements idempotency.RequestCounter. The counts are fields
// of the record's own hash (scripts.go), so they expire with the record's
// key and Delete removes them with it. The counts go in one pipeline, one
// script each, which a cluster client splits by node. They do not wait for
// replicas (WithWait): a count lost in a failover is only a count.
func (s *Store) AddRequests(ctx context.Context, counts []idempotency.KeyCount) error {
	if len(counts) == 0 {
		return nil
	}
	_, err := roundTrip(ctx, &s.flights, func(ctx context.Context) (struct{}, error) {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, len(counts))
		args := make([][]any, len(counts))
		for i, c := range counts {
			args[i] = []any{c.New, c.Replayed, c.Conflict, c.Mismatch, c.Released, unixMilli(c.First), unixMilli(c.Last)}
			cmds[i] = s.scripts.count.EvalSha(ctx, pipe, []string{s.key(c.Scope)}, args[i]...)
		}
		_, _ = pipe.Exec(ctx) // each cmd carries its own error
		var errs []error
		for i, cmd := range cmds {
			err := cmd.Err()
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				// Not loaded on that node, so it did not run: Run loads it.
				err = s.scripts.count.Run(ctx, s.client, []string{s.key(counts[i].Scope)}, args[i]...).Err()
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return struct{}{}, fmt.Errorf("%d of %d counts not added: %w", len(errs), len(counts), errs[0])
		}
		return struct{}{}, nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: add requests: %w", err)
	}
	return nil
}

// RequestCounts implements idempotency.RequestCounter.
func (s *Store) RequestCounts(ctx context.Context, scope idempotency.Scope) (idempotency.KeyCount, error) {
	vals, err := roundTrip(ctx, &s.flights, func(ctx context.Context) ([]any, error) {
		return s.scripts.counts.Run(ctx, s.client, []string{s.key(scope)}).Slice()
	})
	if errors.Is(err, redis.Nil) {
		return idempotency.KeyCount{}, idempotency.ErrNotFound
	}
	if err != nil {
		return idempotency.KeyCount{}, fmt.Errorf("redisstore: request counts: %w", err)
	}
	if len(vals) != 7 {
		return idempotency.KeyCount{}, fmt.Errorf("redisstore: request counts: %w", errMalformed)
	}
	p := fieldParser{v: vals}
	out := idempotency.KeyCount{
		Scope: scope, New: p.int(0), Replayed: p.int(1), Conflict: p.int(2), Mismatch: p.int(3), Released: p.int(4),
		First: p.time(5), Last: p.time(6),
	}
	if p.err != nil {
		return idempotency.KeyCount{}, fmt.Errorf("redisstore: request counts: %w", p.err)
	}
	return out, nil
}

// unixMilli is t in Unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
