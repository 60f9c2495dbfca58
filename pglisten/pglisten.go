// Package pglisten starts a PostgreSQL LISTEN on a connection only once
// it has seen that notifications reach that connection.
//
// A LISTEN through a transaction pooler (PgBouncer in pool_mode
// transaction) succeeds and then hears nothing: the pooler lends the
// server connection that ran it to other clients once the statement ends.
// Listen finds that out at once instead of leaving a listener deaf: it
// listens on a channel of its own, notifies that channel through the
// database handle the writers use, and waits for the notification. The
// gateway's idempotency store (pgstore) and its job watcher (job.Watcher)
// both listen this way. It depends on pgx only.
package pglisten

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotDelivered: the connection took the LISTEN, but a notification
// sent on the database did not reach it — a transaction pooler is in
// between. Poll instead.
var ErrNotDelivered = errors.New("pglisten: a notification sent on the database did not reach the listening connection")

// Notifier sends the test notification: the pool (or the connection) the
// channel's writers use. *pgxpool.Pool and *pgx.Conn are Notifiers.
type Notifier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Listen checks, within timeout, that a notification sent through db
// reaches conn, and then LISTENs on channel. The test channel is private
// (probe followed by random hex), so other listeners of channel never see
// the test. Notifications conn heard before are skipped. It returns
// ErrNotDelivered when the test notification did not come; on any error
// conn is left as it is, for the caller to close.
func Listen(ctx context.Context, conn *pgx.Conn, db Notifier, channel, probe string, timeout time.Duration) error {
	var b [8]byte
	_, _ = crand.Read(b[:])
	test := probe + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{test}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if _, err := db.Exec(ctx, "SELECT pg_notify($1, $2)", test, test); err != nil {
		return fmt.Errorf("test notification: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err == nil && n.Channel == test:
			if _, err := conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{test}.Sanitize()); err != nil {
				return fmt.Errorf("unlisten: %w", err)
			}
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			return nil
		case err == nil:
			continue // a notification the connection heard before: not the test's
		case ctx.Err() == nil && wctx.Err() != nil:
			return ErrNotDelivered
		default:
			return fmt.Errorf("test notification: %w", err)
		}
	}
}
