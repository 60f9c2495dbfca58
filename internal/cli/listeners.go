package cli

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
	"github.com/idemgate/idemgate/internal/cannedproblem"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// server is one listener of the process.
type server struct {
	name, addr string
	handler    http.Handler
	// tls, when set, serves HTTPS (HTTP/2 offered) with these files.
	tls *config.TLSFiles
	// drain, when set, is called as the shutdown begins, and the listener
	// then serves on for server.drain_delay (gateway.StartDraining).
	drain func()
	// flush, when set, is called once the listener has shut down, with
	// what is left of server.shutdown_timeout: it waits for the work the
	// requests left in the background (outcomes still being stored).
	flush func(context.Context) error
}

// runAll serves the listeners and runs each background function until ctx
// ends or one of them fails; then everything stops and is waited for.
// Meanwhile SIGHUP re-reads every certificate in certs.
func runAll(ctx context.Context, cfg *config.Config, logger *slog.Logger, stdout io.Writer, certs *certs, store idempotency.Store, servers []server, background ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	background = append(background, certs.reloadOnHangup(logger))
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
	fail(serve(ctx, cfg, logger, stdout, certs, store, servers))
	cancel()
	wg.Wait()
	return errors.Join(errs...)
}

// serve listens on every server (an empty address is off), runs the
// janitor when the store has one, and on ctx's end shuts down gracefully
// within server.shutdown_timeout: the servers drain for
// server.drain_delay, still serving, then take no new connections while
// the in-flight requests finish and store their records.
func serve(ctx context.Context, cfg *config.Config, logger *slog.Logger, stdout io.Writer, certs *certs, store idempotency.Store, servers []server) error {
	var (
		wg   sync.WaitGroup
		errc = make(chan error, len(servers))
		srvs []*http.Server
	)
	abort := func(err error) error {
		for _, srv := range srvs {
			_ = srv.Close()
		}
		wg.Wait()
		return err
	}
	for _, s := range servers {
		if s.addr == "" {
			continue
		}
		tlsConfig, err := certs.serverConfig(s.tls, logger)
		if err != nil {
			return abort(usagef("%s listener: %v", s.name, err))
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return abort(fmt.Errorf("%s listener: %w", s.name, err))
		}
		srv := httpServer(cfg.Server, s.handler, logger)
		srv.TLSConfig = tlsConfig
		srvs = append(srvs, srv)
		scheme := "http"
		if tlsConfig != nil {
			scheme = "https"
		}
		url := scheme + "://" + ln.Addr().String()
		announce(stdout, cfg.Log.Format, s.name, url)
		logger.Info("listening", "listener", s.name, "url", url, "addr", ln.Addr().String())
		wg.Go(func() {
			var err error
			if tlsConfig != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				// The server's own 400/431/501 answers as problem documents.
				err = srv.Serve(cannedproblem.Listener(ln, cfg.ProblemBase))
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", s.name, err)
			}
		})
	}

	janitorCtx, stopJanitor := context.WithCancel(ctx)
	defer stopJanitor()
	if j, ok := store.(idempotency.Janitor); ok {
		wg.Go(func() {
			_ = idempotency.RunJanitor(janitorCtx, j, cfg.Janitor.Interval, cfg.Janitor.Batch, logger)
		})
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopJanitor()
	logger.Info("shutting down", "timeout", cfg.Server.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err == nil {
		err = drain(servers, cfg.Server.DrainDelay, logger, errc)
	}
	for _, srv := range srvs {
		if e := srv.Shutdown(shutdownCtx); e != nil {
			err = errors.Join(err, e)
			_ = srv.Close()
		}
	}
	wg.Wait()
	for _, s := range servers {
		if s.addr != "" && s.flush != nil {
			err = errors.Join(err, s.flush(shutdownCtx))
		}
	}
	return err
}

// drain starts the draining of every server that has a drain function and
// then, if there was one, serves on for delay, so that a load balancer sees
// /readyz fail and stops sending requests before the listeners close. A
// listener failing meanwhile ends the wait with its error.
func drain(servers []server, delay time.Duration, logger *slog.Logger, errc <-chan error) error {
	draining := false
	for _, s := range servers {
		if s.addr != "" && s.drain != nil {
			s.drain()
			draining = true
		}
	}
	if !draining || delay <= 0 {
		return nil
	}
	logger.Info("draining: /readyz answers 503 while requests are still served", "drain_delay", delay.String())
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case err := <-errc:
		return err
	}
}

// announce tells whoever started the process (a script, a test, a
// supervisor) on stdout that a listener is ready, and where. With log.format
// text the line is "idemgate: NAME listening on URL"; with json it is a
// JSON object like every other line the process writes:
// {"time":…,"level":"INFO","msg":"listening","listener":NAME,"url":URL}.
func announce(stdout io.Writer, format, name, url string) {
	if format == "json" {
		slog.New(slog.NewJSONHandler(stdout, nil)).Info("listening", "listener", name, "url", url)
		return
	}
	fmt.Fprintf(stdout, "idemgate: %s listening on %s\n", name, url)
}
