package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hibiken/asynqmon"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/telemetry"
)

func runServe(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var pprof bool
	pprofFlag := func(fs *flag.FlagSet) {
		fs.BoolVar(&pprof, "pprof", false, "serve CPU and allocation profiles at /debug/pprof/ on the admin listener (admin token required)")
	}
	return runProcess(ctx, ext, "serve", "idemgate-gateway", args, getenv, stdout, stderr, func(p process) error {
		g, err := buildGateway(ctx, p.ext, p.cfg, p.logger, p.svc, p.cl, false, pprof)
		if err != nil {
			return err
		}
		return runAll(ctx, p.cfg, p.logger, stdout, &p.svc.certs, g.store, g.servers(p.cfg))
	}, pprofFlag)
}

// gatewayDeps are the services the gateway uses.
type gatewayDeps struct {
	// pool is set when the store or an enqueue route needs PostgreSQL,
	// or the process runs a worker too.
	pool *pgxpool.Pool
	// redis is set when redis_url is.
	redis redis.UniversalClient
	store idempotency.Store
	// jobs is set when a route enqueues.
	jobs *job.Submitter
	// certs holds the client certificates of routes[].upstream_tls.
	certs *certs
}

// openGatewayDeps opens the gateway's services. withPostgres opens
// PostgreSQL (and so checks it in /readyz) even when neither the store nor
// a route needs it.
func openGatewayDeps(ctx context.Context, cfg *config.Config, svc *services, withPostgres bool) (gatewayDeps, error) {
	deps := gatewayDeps{certs: &svc.certs}
	enqueues := false
	for _, r := range cfg.Routes {
		enqueues = enqueues || r.Enqueue != nil
	}
	if cfg.DatabaseURL != "" && (withPostgres || enqueues || cfg.Store == "postgres") {
		pool, err := svc.postgres(ctx)
		if err != nil {
			return deps, err
		}
		deps.pool = pool
	}
	if cfg.RedisURL != "" {
		rdb, err := svc.redisClient()
		if err != nil {
			return deps, err
		}
		deps.redis = rdb
	}
	store, err := svc.idempotencyStore(ctx)
	if err != nil {
		return deps, err
	}
	deps.store = store
	if enqueues {
		if deps.pool == nil || cfg.RedisURL == "" {
			return deps, usagef("enqueue routes need database_url and redis_url")
		}
		client, err := svc.queueClient()
		if err != nil {
			return deps, err
		}
		deps.jobs = job.NewSubmitter(deps.pool, client)
		deps.jobs.Headers = telemetry.InjectTask
		deps.jobs.Shards = cfg.Shards()
		if deps.jobs.Fairness, err = svc.fairness(); err != nil {
			return deps, err
		}
		if w := cfg.JobsAPI.RedisWait; w.On() {
			rdb, err := svc.redisClient()
			if err != nil {
				return deps, err
			}
			deps.jobs.Broker = &job.BrokerWait{Client: rdb, Replicas: w.Replicas, Timeout: w.Timeout}
		}
		if deps.jobs.Inspector, err = svc.queueInspector(); err != nil {
			return deps, err
		}
	}
	return deps, nil
}

// builtGateway is a gateway and the store its janitor sweeps.
type builtGateway struct {
	*gateway.Gateway
	store  idempotency.Store
	logger *slog.Logger
	once   sync.Once
}

// flush closes the gateway once, within ctx: outcomes the store could not
// take yet are stored before the store is closed. The shutdown calls it
// with what is left of server.shutdown_timeout once the listeners are
// down; the cleanup path calls it again, which then does nothing.
func (g *builtGateway) flush(ctx context.Context) error {
	var err error
	g.once.Do(func() {
		if err = g.Close(ctx); err != nil {
			g.logger.Error("outcomes not stored before shutdown; their keys are released when their lease expires", "err", err)
			err = fmt.Errorf("gateway: %w", err)
		}
	})
	return err
}

func (g *builtGateway) servers(cfg *config.Config) []server {
	return []server{
		{name: "public", addr: cfg.Listen, handler: telemetry.HTTPHandler(g.Handler()), tls: cfg.TLS, drain: g.StartDraining, flush: g.flush},
		{name: "admin", addr: cfg.AdminListen, handler: g.AdminHandler(), tls: cfg.AdminTLS},
	}
}

// buildGateway opens the gateway's services and builds it, with the
// queues' UI on its admin listener when redis_url is set. Its release is
// pushed on cl.
func buildGateway(ctx context.Context, ext extension.Set, cfg *config.Config, logger *slog.Logger, svc *services, cl *closers, withPostgres, pprof bool) (*builtGateway, error) {
	deps, err := openGatewayDeps(ctx, cfg, svc, withPostgres)
	if err != nil {
		return nil, err
	}
	opts, err := gatewayOptions(cfg, deps, logger)
	if err != nil {
		return nil, err
	}
	opts.OpenAPI, opts.OpenAPIJSON, err = servedSpec(cfg)
	if err != nil {
		return nil, err
	}
	opts.Pprof = pprof
	if deps.jobs != nil {
		specs := map[string]*job.Spec{}
		for _, s := range cfg.Jobs() {
			specs[s.Task] = s
		}
		opts.Schedules = &gateway.ScheduleOptions{
			Store: job.NewSchedules(deps.pool), Jobs: deps.jobs, Specs: specs,
			MaxPerTenant: cfg.JobsAPI.Schedules.MaxPerTenant, MinInterval: cfg.JobsAPI.Schedules.MinInterval,
		}
	}
	if w, err := startJobWatcher(cfg, deps, logger, cl); err != nil {
		return nil, err
	} else if w != nil {
		opts.JobWatcher = w
	}
	// The admin API's explain endpoints read what this gateway reads: its
	// own store (a memory store's records live only here), and the job
	// tables when it has PostgreSQL open.
	if opts.Explainer, err = explainerOn(ext, cfg, svc, deps.pool, deps.store); err != nil {
		return nil, err
	}
	g, err := gateway.New(opts)
	if err != nil {
		return nil, usagef("%v", err)
	}
	bg := &builtGateway{Gateway: g, store: deps.store, logger: logger}
	cl.push(func() {
		// When the listeners never served (a start that failed), the
		// gateway still gets the shutdown timeout to flush.
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
		defer cancel()
		_ = bg.flush(ctx)
	})
	if cfg.RedisURL != "" {
		opt, err := svc.queueConn()
		if err != nil {
			return nil, err
		}
		// Read-only: asynqmon's actions (run, archive, delete a task) go to
		// the queue alone and would leave the job's record wrong (a failed
		// job whose task ran again stayed failed). The console acts on
		// jobs through their records instead.
		mon := asynqmon.New(asynqmon.Options{RootPath: queuesPath, RedisConnOpt: opt, ReadOnly: true})
		cl.push(func() { _ = mon.Close() })
		g.AdminMount(queuesPath, withQueuesCSP(mon))
	}
	if err := mountConsole(g, cfg, deps, opts, svc, logger); err != nil {
		return nil, err
	}
	return bg, nil
}

// queuesPath is where asynqmon, the queues' web UI and API, is mounted on
// the admin listener, behind the admin token, read-only.
const queuesPath = "/admin/queues"

// servedSpec is the OpenAPI description the gateway serves: its own
// endpoints and each configured enqueue route with its job's schema.
func servedSpec(cfg *config.Config) (yamlDoc, jsonDoc []byte, err error) {
	var routes []openapi.JobRoute
	for _, r := range cfg.Routes {
		if r.Enqueue == nil {
			continue
		}
		spec, ok := cfg.Job(r.Enqueue.Task)
		if !ok {
			continue // refused when the configuration was loaded
		}
		path := r.Path
		if path == "" {
			path = r.PathPrefix
		}
		jr := openapi.JobRoute{Name: r.Name, Path: path, Prefix: r.PathPrefix != "",
			Methods: r.Methods, Task: spec.Task, Schema: spec.Schema.JSON()}
		if r.Batch != nil {
			jr.BatchPath, jr.BatchMaxItems = r.Batch.Path, r.Batch.MaxItems
		}
		routes = append(routes, jr)
	}
	yamlDoc, jsonDoc, err = openapi.WithJobRoutes(openapi.Spec, routes)
	if err != nil {
		return nil, nil, fmt.Errorf("openapi: describing the enqueue routes: %w", err)
	}
	return yamlDoc, jsonDoc, nil
}
