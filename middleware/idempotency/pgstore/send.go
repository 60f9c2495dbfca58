package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// A write is sent through the batcher or on a connection of its own; either
// way the store learns which backend it went to, which is what settling a
// write whose deadline passed mid-commit needs (ambiguous.go).

// exec runs a write through the batcher when viaBatch (and batching is
// on), else on its own. It reports the backend the statement was sent to,
// 0 when it never left the process, so that a write whose context ended
// while it may have committed can be settled (resolve).
func (s *Store) exec(ctx context.Context, viaBatch bool, order idempotency.Scope, sql string, args ...any) (pgconn.CommandTag, uint32, error) {
	if viaBatch && s.batch != nil {
		o := &op{sql: sql, args: args, order: order}
		if err := s.batch.do(ctx, o); err != nil {
			return pgconn.CommandTag{}, sentTo(o), err
		}
		return o.tag, sentTo(o), nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, 0, err
	}
	defer conn.Release()
	tag, err := conn.Exec(ctx, sql, args...)
	return tag, conn.Conn().PgConn().PID(), err
}

// queryRow is exec for a statement that returns one row.
func (s *Store) queryRow(ctx context.Context, viaBatch bool, order idempotency.Scope, sql string, scan func(pgx.Row) error, args ...any) (uint32, error) {
	if viaBatch && s.batch != nil {
		o := &op{sql: sql, args: args, order: order, scan: scan}
		err := s.batch.do(ctx, o)
		return sentTo(o), err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return conn.Conn().PgConn().PID(), scan(conn.QueryRow(ctx, sql, args...))
}

// sentTo is the backend o was sent to, 0 when it was not.
func sentTo(o *op) uint32 {
	if pid := o.state.Load(); pid != gaveUp && pid != leads {
		return pid
	}
	return 0
}

// rerun reports whether err is a failed batch, whose statement must now
// run on its own; one that may have committed counts as a lost connection.
func rerun(err error, viaBatch *bool, lost *int) bool {
	var be *batchError
	if !errors.As(err, &be) {
		return false
	}
	*viaBatch = false
	if be.committed {
		*lost++
	}
	return true
}
