package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// server is one listener of the process.
type server struct {
	name, addr string
	handler    http.Handler
}

// runAll serves the listeners and runs each background function until ctx
// ends or one of them fails; then everything stops and is waited for.
func runAll(ctx context.Context, cfg *config.Config, logger *slog.Logger, stdout io.Writer, store idempotency.Store, servers []server, background ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			cancel()
		}
	}
	for _, f := range background {
		wg.Go(func() { fail(f(ctx)) })
	}
	fail(serve(ctx, cfg, logger, stdout, store, servers))
	cancel()
	wg.Wait()
	return errors.Join(errs...)
}

// serve listens on every server (an empty address is off), runs the
// janitor when the store has one, and on ctx's end shuts down gracefully:
// no new connections, in-flight requests finish and store their records.
func serve(ctx context.Context, cfg *config.Config, logger *slog.Logger, stdout io.Writer, store idempotency.Store, servers []server) error {
	var (
		wg   sync.WaitGroup
		errc = make(chan error, len(servers))
		srvs []*http.Server
	)
	for _, s := range servers {
		if s.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			for _, srv := range srvs {
				_ = srv.Close()
			}
			wg.Wait()
			return fmt.Errorf("%s listener: %w", s.name, err)
		}
		srv := httpServer(cfg.Server, s.handler, logger)
		srvs = append(srvs, srv)
		fmt.Fprintf(stdout, "idemgate: %s listening on http://%s\n", s.name, ln.Addr())
		logger.Info("listening", "listener", s.name, "addr", ln.Addr().String())
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", s.name, err)
			}
		})
	}

	janitorCtx, stopJanitor := context.WithCancel(ctx)
	defer stopJanitor()
	if j, ok := store.(idempotency.Janitor); ok {
		wg.Go(func() {
			_ = idempotency.RunJanitor(janitorCtx, j, time.Duration(cfg.Janitor.Interval), cfg.Janitor.Batch, logger)
		})
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopJanitor()
	logger.Info("shutting down", "timeout", cfg.Server.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Server.ShutdownTimeout))
	defer cancel()
	for _, srv := range srvs {
		if e := srv.Shutdown(shutdownCtx); e != nil {
			err = errors.Join(err, e)
			_ = srv.Close()
		}
	}
	wg.Wait()
	return err
}
