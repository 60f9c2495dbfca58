package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/lock"
)

func runWorker(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runProcess(ctx, ext, "worker", "idemgate-worker", args, getenv, stdout, stderr, func(p process) error {
		w, err := buildWorker(ctx, p.ext, p.cfg, p.logger, p.svc)
		if err != nil {
			return err
		}
		return runAll(ctx, p.cfg, p.logger, stdout, &p.svc.certs, nil, []server{w.adminServer(p.cfg)}, w.srv.Run, w.relay.Run, w.scheduler.Run, w.ledgerJanitor, w.callbacks.Run, w.dispatch, w.pauses.Run)
	})
}

// worker is an asynq server running the declared jobs, the relay that
// enqueues again the tasks the queue lost, and its admin listener's
// handler (/metrics, /healthz).
type worker struct {
	srv   *workers.Server
	relay *job.Relay
	// scheduler fires the recurring schedules (job/scheduler.go).
	scheduler *job.Scheduler
	// ledgerJanitor deletes final jobs with their ledger past
	// jobs_retention, and final executions (and the ledger rows of tasks
	// run without a job) past executions_retention.
	ledgerJanitor func(context.Context) error
	// callbacks sends the final-status callbacks (on_final).
	callbacks *workers.FinalCallbacks
	// dispatch runs the fairness pools' dispatchers (none without pools).
	dispatch func(context.Context) error
	// pauses is the worker's copy of the pauses in force.
	pauses *job.PauseCache
	admin  http.Handler
}

func (w *worker) adminServer(cfg *config.Config) server {
	return server{name: "worker-admin", addr: cfg.Worker.AdminListen, handler: w.admin, tls: cfg.Worker.AdminTLS}
}

// buildWorker opens the worker's services and builds its server: one
// handler per declared job, delivered over HTTP or run by the Go handler
// registered for its task by ext.
func buildWorker(ctx context.Context, ext extension.Set, cfg *config.Config, logger *slog.Logger, svc *services) (*worker, error) {
	if cfg.DatabaseURL == "" || cfg.RedisURL == "" {
		return nil, usagef("worker: database_url and redis_url are required")
	}
	pool, err := svc.postgres(ctx)
	if err != nil {
		return nil, err
	}
	rdb, err := svc.redisClient()
	if err != nil {
		return nil, err
	}
	opt, err := svc.queueConn()
	if err != nil {
		return nil, err
	}
	inspector, err := svc.queueInspector()
	if err != nil {
		return nil, err
	}
	client, err := svc.queueClient()
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := telemetry.NewWorkerMetrics(reg)
	specs := cfg.Jobs()
	for _, spec := range specs {
		metrics.InitTasks(spec.Task)
	}
	for _, l := range cfg.LimitDefs() {
		metrics.InitLimits(l.Name)
	}
	reg.MustRegister(telemetry.NewQueueCollector(inspector, slices.Sorted(maps.Keys(cfg.WorkerConfig().Queues)), logger))

	deps := cfg.Worker.Deps(pool, rdb)
	pauses, err := newPauseCache(cfg, pool, logger)
	if err != nil {
		return nil, err
	}
	// The worker knows the pauses in force before its first delivery.
	if err := pauses.Load(ctx); err != nil {
		return nil, err
	}
	deps.Pauses = pauses
	var breakers []string
	for _, l := range cfg.LimitDefs() {
		if l.PauseAfter != nil {
			breakers = append(breakers, l.Name)
		}
	}
	metrics.RegisterOpenBreakers(reg, breakers, pauses.OpenBreakers)
	deps.Logger = logger
	// The relay hands over the jobs whose worker lost its lock, asking the
	// workers' own locks (job/takeover.go).
	locks, err := lock.New(rdb, deps.Lock)
	if err != nil {
		return nil, usagef("worker: %v", err)
	}
	relayOpts := cfg.Worker.RelayOptions()
	relayOpts.Logger = logger
	relayOpts.Locks = locks
	sub := job.NewSubmitter(pool, client)
	sub.Shards = cfg.Shards()
	fair, err := svc.fairness()
	if err != nil {
		return nil, err
	}
	sub.Fairness = fair
	dispatch := func(ctx context.Context) error { <-ctx.Done(); return nil }
	serverOpts := []workers.ServerOption{workers.WithLogger(logger)}
	if fair != nil {
		fair.Observer, fair.Logger = telemetry.NewFairMetrics(reg), logger
		dispatch = func(ctx context.Context) error { return fair.Run(ctx, sub, inspector) }
		serverOpts = append(serverOpts, workers.WithFairness(fair))
	}
	relay := job.NewRelay(sub, inspector, relayOpts)
	deps.Observer = metrics
	records := job.NewStore(pool)
	// The job documents: written with the execution state at an
	// attempt's start and success, through records.Follow otherwise.
	deps.Jobs = records
	cancels := workers.NewCancelWatcher(records.Cancelling, cfg.Worker.WithDefaults().CancelCheckInterval, logger)
	deps.Cancels = cancels
	handlers := workers.NewHandlers()
	env := extension.Worker{
		DB: pool, Redis: rdb, Metrics: reg, Logger: logger,
		HTTPClient: &http.Client{Transport: telemetry.HTTPTransport(nil)},
	}
	for _, h := range ext.Handlers {
		if err := h.Register(handlers, env); err != nil {
			return nil, usagef("worker: %v", err)
		}
	}
	mux, err := handlers.Mux(deps, specs, workers.HTTPDelivery{
		Client: &http.Client{Transport: telemetry.HTTPTransport(nil)},
	})
	if err != nil {
		return nil, usagef("worker: %v", err)
	}
	mux.Use(telemetry.TaskTracing(telemetry.WithFailure(workers.IsFailure)))
	srv, err := workers.NewServer(opt, cfg.WorkerConfig(), mux, append(serverOpts, workers.WithCancelWatcher(cancels))...)
	if err != nil {
		return nil, usagef("worker: %v", err)
	}

	admin := http.NewServeMux()
	guard := gateway.NewAdminGuard(cfg.Admin.MaxAuthFailures, reg, logger)
	admin.Handle("GET /metrics", requireAdminToken(cfg.Worker.AdminTokenSHA256, cfg.ProblemBase, guard,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	// /healthz stays open: it says only that the process is up, and an
	// orchestrator's liveness probe should not need a secret.
	admin.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	janitor := newRetentionJanitor(pool, inspector, cfg, telemetry.NewRetentionMetrics(reg))
	ledgerJanitor := func(ctx context.Context) error {
		return idempotency.RunJanitor(ctx, janitor, cfg.Janitor.Interval, cfg.Janitor.Batch, logger)
	}
	var finalTasks []string
	for _, s := range specs {
		if s.OnFinal != nil {
			finalTasks = append(finalTasks, s.Task)
		}
	}
	callbacks := workers.NewFinalCallbacks(workers.FinalCallbacksConfig{
		DB: pool, Specs: specs, Document: gateway.JobDocument, Logger: logger,
		Client:   &http.Client{Transport: telemetry.HTTPTransport(nil)},
		Observer: telemetry.NewCallbackMetrics(reg, finalTasks...),
	})
	// The configuration's schedules, written before the first pass: a
	// schedule declared is never fired from a stale row.
	if err := job.NewSchedules(pool).Declare(ctx, cfg.Schedules(), time.Now()); err != nil {
		return nil, err
	}
	scheduler, err := job.NewScheduler(sub, pool, specs, job.SchedulerOptions{
		Logger: logger, Missed: telemetry.NewScheduleMetrics(reg).Missed,
		History: cfg.JobsRetention,
	})
	if err != nil {
		return nil, err
	}
	return &worker{srv: srv, relay: relay, scheduler: scheduler, ledgerJanitor: ledgerJanitor, callbacks: callbacks, dispatch: dispatch, pauses: pauses, admin: requestid.Middleware(admin)}, nil
}

// requireAdminToken puts next behind the token whose hex SHA-256 is
// tokenSHA256, as the gateway's admin listener does, guard throttling the
// peers that guess. An empty tokenSHA256 (checked by config) lets
// everything through.
func requireAdminToken(tokenSHA256, problemBase string, guard *gateway.AdminGuard, next http.Handler) http.Handler {
	if tokenSHA256 == "" {
		return next
	}
	var want [sha256.Size]byte
	_, _ = hex.Decode(want[:], []byte(tokenSHA256))
	return gateway.RequireAdminToken(next, want, gateway.AdminChallenge,
		"the worker's /metrics needs the admin bearer token", gateway.NewProblemWriter(problemBase, nil), guard)
}

// newPauseCache returns the worker's copy of the pauses in force. It
// LISTENs on database_direct_url when set, else on a connection taken out
// of the pool for good, and polls every job.DefaultPausePoll either way.
func newPauseCache(cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) (*job.PauseCache, error) {
	direct, err := directConfig(cfg)
	if err != nil {
		return nil, err
	}
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
	return job.NewPauseCache(job.NewPauses(pool), job.PauseCacheOptions{Connect: connect, Logger: logger}), nil
}
