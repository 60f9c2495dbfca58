package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/ratelimit/redislimit"
	"github.com/idemgate/idemgate/telemetry"
)

// loadConfig reads the file named by --config. Every problem in it is a
// usage error (exit 2), printed one per line. The example jobs are the
// declarations of routes that name their tasks without declaring them
// (configurations written before jobs were declared). runsJobs says the
// command runs the declared jobs, so each needs deliver.http or a Go
// handler of this binary.
func loadConfig(path string, getenv func(string) string, runsJobs bool) (*config.Config, error) {
	if path == "" {
		return nil, usagef("--config FILE is required")
	}
	opts := []config.Option{config.WithDefaultJobs(examples.JobsYAML)}
	if runsJobs {
		opts = append(opts, config.WithHandlers(examples.Tasks()...))
	}
	cfg, err := config.Load(path, getenv, opts...)
	if err != nil {
		var probs *config.Problems
		if errors.As(err, &probs) {
			return nil, usagef("invalid configuration:\n%s", probs.Error())
		}
		return nil, usagef("%v", err)
	}
	return cfg, nil
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "text" {
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, opts)))
}

// services are the connections a command opened; close releases them.
type services struct {
	pool  *pgxpool.Pool
	redis redis.UniversalClient
	store idempotency.Store
	// jobs is set when a route enqueues.
	jobs  *enqueue.Enqueuer
	close []func()
}

func (s *services) Close() {
	for i := len(s.close) - 1; i >= 0; i-- {
		s.close[i]()
	}
}

// openPostgres connects to database_url.
func openPostgres(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, usagef("database_url: %v", err)
	}
	pc.MaxConns = max(pc.MaxConns, 32)
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	pc.ConnConfig.Tracer = telemetry.PgxTracer()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, nil
}

// newRedis returns a client for redis_url: one node for a redis:// or
// rediss:// URL or a single host:port, a cluster client for a comma list of
// several nodes.
func newRedis(redisURL string) (redis.UniversalClient, error) {
	if strings.Contains(redisURL, "://") {
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			return nil, usagef("redis_url: %v", err)
		}
		return redis.NewClient(opt), nil
	}
	addrs := redisNodes(redisURL)
	if len(addrs) == 1 {
		return redis.NewClient(&redis.Options{Addr: addrs[0]}), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), nil
}

// openServices connects what cfg needs: PostgreSQL when it is the store (or
// needed), Redis when configured, and the idempotency store.
func openServices(ctx context.Context, cfg *config.Config, needPostgres bool) (*services, error) {
	s := &services{}
	enqueues := false
	for _, r := range cfg.Routes {
		enqueues = enqueues || r.Enqueue != nil
	}
	needPostgres = needPostgres || enqueues
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if cfg.DatabaseURL != "" && (needPostgres || cfg.Store == "postgres") {
		pool, err := openPostgres(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		s.pool = pool
		s.close = append(s.close, pool.Close)
	}
	if cfg.RedisURL != "" {
		rdb, err := newRedis(cfg.RedisURL)
		if err != nil {
			return nil, err
		}
		s.redis = rdb
		s.close = append(s.close, func() { _ = rdb.Close() })
		if err := telemetry.InstrumentRedis(rdb); err != nil {
			return nil, err
		}
	}
	switch cfg.Store {
	case "postgres":
		if s.pool == nil {
			return nil, usagef("store postgres needs database_url (or DATABASE_URL)")
		}
		st := pgstore.New(s.pool)
		s.store = st
		s.close = append(s.close, st.Close)
	case "redis":
		if s.redis == nil {
			return nil, usagef("store redis needs redis_url (or REDIS_URL)")
		}
		st := redisstore.New(s.redis)
		s.store = st
		s.close = append(s.close, func() { _ = st.Close() })
	default:
		s.store = memstore.New()
	}
	if enqueues {
		if s.pool == nil || cfg.RedisURL == "" {
			return nil, usagef("enqueue routes need database_url and redis_url")
		}
		opt, err := asynqRedis(cfg.RedisURL)
		if err != nil {
			return nil, err
		}
		client := asynq.NewClient(opt)
		s.close = append(s.close, func() { _ = client.Close() })
		s.jobs = enqueue.New(s.pool, client)
		s.jobs.Headers = telemetry.InjectTask
	}
	ok = true
	return s, nil
}

// replayCache is the gateway's cache of completed records, nil when off.
func replayCache(c config.ReplayCache) *idempotency.ReplayCache {
	if c.Off {
		return nil
	}
	return idempotency.NewReplayCache(c.Entries, time.Duration(c.TTL))
}

// gatewayOptions turns the configuration into the gateway's options.
func gatewayOptions(cfg *config.Config, svc *services, logger *slog.Logger) (gateway.Options, error) {
	opts := gateway.Options{
		ProblemBase:      cfg.ProblemBase,
		Auth:             auth.Config{Mode: auth.Mode(cfg.Auth.Mode), Header: cfg.Auth.Header},
		RateLimits:       ratelimit.Limits{},
		Store:            svc.store,
		StoreName:        cfg.Store,
		AdminTokenSHA256: cfg.AdminTokenSHA256,
		Logger:           logger,
		ReplayCache:      replayCache(cfg.ReplayCache),
		Transport: telemetry.HTTPTransport(gateway.NewTransport(gateway.TransportConfig{
			DialTimeout:           time.Duration(cfg.Proxy.DialTimeout),
			ResponseHeaderTimeout: time.Duration(cfg.Proxy.ResponseHeaderTimeout),
			IdleConnTimeout:       time.Duration(cfg.Proxy.IdleConnTimeout),
			MaxIdleConnsPerHost:   cfg.Proxy.MaxIdleConnsPerHost,
		})),
	}
	for _, t := range cfg.Tenants {
		opts.Auth.Tenants = append(opts.Auth.Tenants, auth.TenantKeys{Name: t.Name, APIKeySHA256s: t.APIKeySHA256})
		if t.RateLimit != nil {
			opts.RateLimits[t.Name] = ratelimit.Limit{Tokens: uint64(t.RateLimit.Tokens), Interval: time.Duration(t.RateLimit.Interval)}
		}
	}
	if cfg.RateLimitStore == "redis" {
		rdb := svc.redis
		opts.RateLimitStore = func(l ratelimit.Limit) (limiter.Store, error) {
			return redislimit.New(rdb, &redislimit.Config{Tokens: l.Tokens, Interval: l.Interval})
		}
	}
	if svc.jobs != nil {
		opts.Jobs = svc.jobs
	}
	if svc.pool != nil {
		pool := svc.pool
		opts.Ready = append(opts.Ready, gateway.Check{Name: "postgres", Check: pool.Ping})
	}
	if svc.redis != nil {
		rdb := svc.redis
		opts.Ready = append(opts.Ready, gateway.Check{Name: "redis", Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		ro := gateway.RouteOptions{
			Name:        r.Name,
			Methods:     r.Methods,
			Path:        r.Path,
			Timeout:     time.Duration(r.Timeout),
			Idempotency: idempotencyConfig(r.Idempotency()),
		}
		if r.PathPrefix != "" {
			ro.Path, ro.Prefix = r.PathPrefix, true
		}
		switch {
		case r.Upstream != "":
			u, err := url.Parse(r.Upstream)
			if err != nil {
				return opts, usagef("routes[%d].upstream: %v", i, err)
			}
			ro.Upstream = u
		case r.Enqueue != nil:
			spec, ok := cfg.Job(r.Enqueue.Task)
			if !ok {
				return opts, usagef("routes[%d].enqueue.task: %q is not a declared job", i, r.Enqueue.Task)
			}
			ro.Enqueue = &gateway.EnqueueOptions{Spec: spec, Queue: r.Enqueue.Queue}
		}
		opts.Routes = append(opts.Routes, ro)
	}
	return opts, nil
}

func idempotencyConfig(d config.Idempotency) idempotency.Config {
	return idempotency.Config{
		Methods:                d.Methods,
		KeySyntax:              idempotency.KeySyntax(d.KeySyntax),
		MaxKeyLength:           d.MaxKeyLength,
		Retention:              time.Duration(d.Retention),
		Lease:                  time.Duration(d.Lease),
		WaitInFlight:           time.Duration(d.WaitInFlight),
		MaxRequestBytes:        d.MaxRequestBytes,
		MaxStoredResponseBytes: d.MaxStoredResponseBytes,
		FingerprintHeaders:     d.Fingerprint.Headers,
		FingerprintJSONFields:  d.Fingerprint.JSONFields,
		OnStoreError:           idempotency.StoreErrorPolicy(d.OnStoreError),
		OnAmbiguous:            idempotency.AmbiguousPolicy(d.OnAmbiguous),
	}
}
