package cli

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/job"
)

// startJobWatcher runs the gateway's one job.Watcher, which wakes the
// GET /v1/jobs/{id}?wait= waiting on a job, until cl closes (after the
// listeners have shut down). Its listener LISTENs on database_direct_url
// when it is set, else on a connection taken out of the pool for good;
// through a transaction pooler with no direct URL the listener finds that
// notifications cannot reach it, and the waits are served by polling.
// Nil when the gateway has no enqueue routes.
func startJobWatcher(cfg *config.Config, deps gatewayDeps, logger *slog.Logger, cl *closers) (*job.Watcher, error) {
	if deps.jobs == nil || deps.pool == nil {
		return nil, nil
	}
	direct, err := directConfig(cfg)
	if err != nil {
		return nil, err
	}
	pool := deps.pool
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		if direct != nil {
			return pgx.ConnectConfig(ctx, direct)
		}
		pc, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return pc.Hijack(), nil
	}
	w := job.NewWatcher(pool, job.WatcherOptions{Connect: connect, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	cl.push(func() {
		cancel()
		wg.Wait()
	})
	return w, nil
}
