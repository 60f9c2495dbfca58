package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/workers"
)

func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, logger, err := loadCommand("worker", args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	stopTracing, err := startTracing(ctx, "idemgate-worker", getenv, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	w, err := openWorker(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer w.close()
	return runAll(ctx, cfg, logger, stdout, nil, []server{{name: "worker-admin", addr: cfg.Worker.AdminListen, handler: w.admin}}, w.srv.Run)
}

// worker is an asynq server running the business handlers.
type worker struct {
	srv   *workers.Server
	admin http.Handler
	close func()
}

func workerConfig(c config.Worker) workers.Config {
	return workers.Config{
		Concurrency:     c.Concurrency,
		Queues:          c.Queues,
		LockTTL:         time.Duration(c.LockTTL),
		MaxAttempts:     c.MaxAttempts,
		ShutdownTimeout: time.Duration(c.ShutdownTimeout),
	}
}

// openWorker connects the worker's services and builds its server: one
// handler per declared job, delivered over HTTP or run by the Go handler
// registered for its task.
func openWorker(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*worker, error) {
	if cfg.DatabaseURL == "" || cfg.RedisURL == "" {
		return nil, usagef("worker: database_url and redis_url are required")
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	w, err := buildWorker(ctx, cfg, logger, &closers)
	if err != nil {
		closeAll()
		return nil, err
	}
	w.close = closeAll
	return w, nil
}

func buildWorker(ctx context.Context, cfg *config.Config, logger *slog.Logger, closers *[]func()) (*worker, error) {
	pool, err := openPostgres(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, pool.Close)
	rdb, err := newRedis(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, func() { _ = rdb.Close() })
	if err := telemetry.InstrumentRedis(rdb); err != nil {
		return nil, err
	}
	opt, err := asynqRedis(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	wc := workerConfig(cfg.Worker)
	deps := wc.Deps(pool, rdb)
	deps.Logger = logger
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := telemetry.NewWorkerMetrics(reg)
	specs := cfg.Jobs()
	for _, spec := range specs {
		metrics.InitTasks(spec.Task)
	}
	deps.Observer = metrics
	inspector := asynq.NewInspector(opt)
	*closers = append(*closers, func() { _ = inspector.Close() })
	reg.MustRegister(telemetry.NewQueueCollector(inspector, slices.Sorted(maps.Keys(cfg.Worker.Queues)), logger))
	jobs := enqueue.NewJobs(pool)
	deps.OnStatus = func(ctx context.Context, task *asynq.Task, key, status string, attempts int, resultRef, lastErr string) {
		id := task.Headers()[enqueue.HeaderJobID]
		if id == "" {
			return // a task not submitted through the gateway
		}
		if err := jobs.SetStatus(ctx, id, status, attempts, resultRef, lastErr); err != nil {
			logger.WarnContext(ctx, "job status not recorded", "job_id", id, "status", status, "err", err)
		}
	}
	handlers, err := exampleHandlers(cfg, pool, rdb, metrics.NotificationDedup)
	if err != nil {
		return nil, usagef("worker: %v", err)
	}
	mux, err := handlers.Mux(deps, specs, workers.HTTPDelivery{
		Client: &http.Client{Transport: telemetry.HTTPTransport(nil)},
	})
	if err != nil {
		return nil, usagef("worker: %v", err)
	}
	mux.Use(telemetry.TaskTracing(telemetry.WithFailure(workers.IsFailure)))
	srv, err := workers.NewServer(opt, wc, mux, workers.WithLogger(logger))
	if err != nil {
		return nil, usagef("worker: %v", err)
	}
	admin := http.NewServeMux()
	admin.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	admin.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return &worker{srv: srv, admin: admin}, nil
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
