package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/logwriter"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/ratelimit/redislimit"
	"github.com/idemgate/idemgate/telemetry"
)

// This file is where the configuration becomes the product's objects: the
// gateway's options, its servers and transport. The settings a library
// owns are not copied: the configuration holds the library's own Config
// (each route's Idempotency, Worker.Config), which goes to the library as
// it is.

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	return slog.New(telemetry.LogHandler(logHandler(cfg, w)))
}

// logHandler is the configured format and level on w.
func logHandler(cfg *config.Config, w io.Writer) slog.Handler {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "text" {
		return slog.NewTextHandler(w, opts)
	}
	return slog.NewJSONHandler(w, opts)
}

// bufferLog returns the logger of a long-running command: lines gathered
// for up to log.flush_interval and written together (package logwriter),
// warnings and errors at once. The returned function writes what is left
// and stops the flusher; call it after the last line. With the interval
// at 0 the logger is returned as it is.
func bufferLog(cfg *config.Config, logger *slog.Logger, stderr io.Writer) (*slog.Logger, func()) {
	interval := cfg.Log.Flush()
	if interval <= 0 {
		return logger, func() {}
	}
	w := logwriter.New(stderr, logBufferSize)
	buffered := slog.New(telemetry.LogHandler(logwriter.Handler(logHandler(cfg, w), w, slog.LevelWarn)))
	takeProcessLogs(buffered, stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, interval)
	}()
	return buffered, func() {
		cancel()
		<-done
	}
}

// logBufferSize is the log's buffer: a line longer than that is written
// through, and a fuller buffer is written before the interval ends.
const logBufferSize = 64 << 10

// logExit logs the error a command that writes JSON logs ends with, so
// that its last line is JSON too, and marks it logged for exitCode. With
// text logs the error is printed as "idemgate: …", as before the logger
// existed.
func logExit(cfg *config.Config, logger *slog.Logger, err error) error {
	if err == nil || cfg.Log.Format != "json" {
		return err
	}
	logger.Error("exiting", "err", err)
	return &loggedError{err}
}

// takeProcessLogs sends what libraries write through the process-wide
// loggers — the standard log package (OpenTelemetry's errors among them)
// and go-redis — to logger, in its format. Only a command writing to the
// process's own stderr does so: commands run inside tests keep their
// output apart.
func takeProcessLogs(logger *slog.Logger, stderr io.Writer) {
	if f, ok := stderr.(*os.File); !ok || f != os.Stderr {
		return
	}
	slog.SetDefault(logger)
	redis.SetLogger(redisLogger{logger})
}

// redisLogger is go-redis's logger on slog.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}

// postgresConfig is the pool for database_url, traced. Unless the URL
// names a query mode, the pool refuses a connection that goes through a
// connection pooler (pooler.go).
func postgresConfig(dbURL string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, usagef("database_url: %v", err)
	}
	pc.MaxConns = max(pc.MaxConns, 32)
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	pc.ConnConfig.Tracer = telemetry.PgxTracer()
	if !namesExecMode(dbURL) {
		pc.AfterConnect = refusePooler
	}
	return pc, nil
}

// directConfig is the connection for database_direct_url: a session of
// its own on the database, for the postgres store's listener. Nil when
// the key is unset: the listener then takes a connection of the pool.
func directConfig(cfg *config.Config) (*pgx.ConnConfig, error) {
	if cfg.DatabaseDirectURL == "" {
		return nil, nil
	}
	cc, err := pgx.ParseConfig(cfg.DatabaseDirectURL)
	if err != nil {
		return nil, usagef("database_direct_url: %v", err)
	}
	cc.ConnectTimeout = 5 * time.Second
	return cc, nil
}

// newRedis returns a client for redis_url: one node for a redis:// or
// rediss:// URL or a single host:port, a failover client that asks the
// sentinels for the master for a URL with master_name, a cluster client for
// a comma list of several nodes.
func newRedis(redisURL string) (redis.UniversalClient, error) {
	if strings.Contains(redisURL, "://") {
		fo, err := redisFailover(redisURL)
		if err != nil {
			return nil, err
		}
		if fo != nil {
			return redis.NewFailoverClient(fo), nil
		}
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

// asynqRedis returns asynq's own connection options for redis_url: asynq
// gets clients of its own, never the traced ones the gateway uses. The URL
// is read by go-redis, as for newRedis, so that both reach the same server
// as the same user; of its parameters asynq takes the timeouts, the pool
// size and TLS.
func asynqRedis(redisURL string) (asynq.RedisConnOpt, error) {
	if strings.Contains(redisURL, "://") {
		fo, err := redisFailover(redisURL)
		if err != nil {
			return nil, err
		}
		if fo != nil {
			return asynqFailover(fo), nil
		}
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			return nil, usagef("redis_url: %v", err)
		}
		return asynq.RedisClientOpt{
			Network: opt.Network, Addr: opt.Addr, Username: opt.Username, Password: opt.Password, DB: opt.DB,
			DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout,
			PoolSize: opt.PoolSize, TLSConfig: opt.TLSConfig,
		}, nil
	}
	addrs := redisNodes(redisURL)
	if len(addrs) == 1 {
		return asynq.RedisClientOpt{Addr: addrs[0]}, nil
	}
	return asynq.RedisClusterClientOpt{Addrs: addrs}, nil
}

// redisFailover parses redis_url in go-redis's failover form,
//
//	redis://[[user]:sentinel-password@]sentinel-1:26379/0?master_name=mymaster&addr=sentinel-2:26379&password=…
//
// whose hosts are sentinels: the URL's host and each addr parameter. It
// returns nil for a URL without master_name.
func redisFailover(redisURL string) (*redis.FailoverOptions, error) {
	u, err := url.Parse(redisURL)
	if err != nil || !u.Query().Has("master_name") {
		return nil, nil // not the failover form; redis.ParseURL says what is wrong
	}
	fo, err := redis.ParseFailoverURL(redisURL)
	if err != nil {
		return nil, usagef("redis_url: %v", err)
	}
	if fo.MasterName == "" {
		return nil, usagef("redis_url: master_name is empty")
	}
	return fo, nil
}

// asynqFailover is asynq's view of the failover options: the master's
// name, the sentinels, the credentials, the database, the timeouts, the
// pool size and TLS.
func asynqFailover(fo *redis.FailoverOptions) asynq.RedisFailoverClientOpt {
	return asynq.RedisFailoverClientOpt{
		MasterName:       fo.MasterName,
		SentinelAddrs:    fo.SentinelAddrs,
		SentinelUsername: fo.SentinelUsername,
		SentinelPassword: fo.SentinelPassword,
		Username:         fo.Username,
		Password:         fo.Password,
		DB:               fo.DB,
		DialTimeout:      fo.DialTimeout,
		ReadTimeout:      fo.ReadTimeout,
		WriteTimeout:     fo.WriteTimeout,
		PoolSize:         fo.PoolSize,
		TLSConfig:        fo.TLSConfig,
	}
}

// redisNodes splits a redis_url that is not a URL: one HOST:PORT, or a
// Redis Cluster's seed nodes separated by commas.
func redisNodes(redisURL string) []string {
	var addrs []string
	for _, a := range strings.Split(redisURL, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// httpServer is one listener's server, with the server settings.
func httpServer(c config.Server, handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// gatewayOptions turns the configuration into the gateway's options, with
// the services deps opened for it.
func gatewayOptions(cfg *config.Config, deps gatewayDeps, logger *slog.Logger) (gateway.Options, error) {
	opts := gateway.Options{
		ProblemBase:      cfg.ProblemBase,
		Auth:             auth.Config{Mode: auth.Mode(cfg.Auth.Mode), Header: cfg.Auth.Header},
		RateLimits:       ratelimit.Limits{},
		Store:            deps.store,
		StoreName:        cfg.Store,
		AdminTokenSHA256: cfg.AdminTokenSHA256,
		Logger:           logger,
		ReplayCache:      replayCache(cfg.ReplayCache),
		MaxInFlight:      maxInFlight(cfg.Server.MaxInFlight, openFileLimit(), logger),
		MaxWait:          cfg.JobsAPI.MaxWait,
		MaxDepth:         cfg.JobsAPI.MaxDepth,
	}
	opts.AdminMaxAuthFailures = cfg.Admin.MaxAuthFailures
	opts.MaxWaiters, opts.MaxWaitersPerTenant = cfg.JobsAPI.MaxWaiters, cfg.JobsAPI.MaxWaitersPerTenant
	opts.RequireItemKeys = cfg.JobsAPI.Batch.RequireItemKeys
	opts.RefuseCrossSite = cfg.Auth.CrossSite == config.CrossSiteRefuse
	shared := gateway.NewTransport(transportConfig(cfg.Proxy))
	opts.Transport = telemetry.HTTPTransport(shared)
	for _, t := range cfg.Tenants {
		opts.Auth.Tenants = append(opts.Auth.Tenants, auth.TenantKeys{Name: t.Name, APIKeySHA256s: t.APIKeySHA256})
		if t.RateLimit != nil {
			opts.RateLimits[t.Name] = ratelimit.Limit{Tokens: uint64(t.RateLimit.Tokens), Interval: t.RateLimit.Interval}
		}
	}
	if cfg.RateLimitStore == "redis" {
		rdb := deps.redis
		opts.RateLimitStore = func(l ratelimit.Limit) (limiter.Store, error) {
			return redislimit.New(rdb, &redislimit.Config{Tokens: l.Tokens, Interval: l.Interval})
		}
	}
	if deps.jobs != nil {
		opts.Jobs = deps.jobs
	}
	if deps.pool != nil {
		opts.Actions = job.NewStore(deps.pool)
		opts.Pauses = pauseAdmin{Pauses: job.NewPauses(deps.pool), cfg: cfg}
	}
	if deps.redis != nil {
		opts.Limits = newLimitReader(cfg, deps.redis)
	}
	switch {
	case deps.jobs != nil && deps.jobs.Fairness != nil:
		opts.Fairness = deps.jobs.Fairness
	case deps.redis != nil && len(cfg.FairPools()) > 0:
		f, err := job.NewFairness(deps.redis, cfg.FairPools(), cfg.Jobs())
		if err != nil {
			return opts, usagef("%v", err)
		}
		f.Shards = cfg.Shards()
		opts.Fairness = f
	}
	if deps.pool != nil {
		pool := deps.pool
		opts.Ready = append(opts.Ready, gateway.Check{Name: "postgres", Check: pool.Ping})
	}
	if deps.redis != nil {
		rdb := deps.redis
		opts.Ready = append(opts.Ready, gateway.Check{Name: "redis", Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		ro := gateway.RouteOptions{
			Name:        r.Name,
			Methods:     r.Methods,
			Path:        r.Path,
			Timeout:     r.Timeout,
			Idempotency: r.Idempotency,

			HonourMethodOverride: r.MethodOverride == config.MethodOverrideHonour,
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
			if r.UpstreamTLS != nil {
				t, err := deps.certs.upstreamTransport(shared, r.UpstreamTLS, logger)
				if err != nil {
					return opts, usagef("routes[%d].upstream_tls: %v", i, err)
				}
				ro.Transport = telemetry.HTTPTransport(t)
			}
		case r.Enqueue != nil:
			spec, ok := cfg.Job(r.Enqueue.Task)
			if !ok {
				return opts, usagef("routes[%d].enqueue.task: %q is not a declared job", i, r.Enqueue.Task)
			}
			ro.Enqueue = &gateway.EnqueueOptions{Spec: spec, Queue: r.Enqueue.Queue}
			if r.Batch != nil {
				ro.Enqueue.Batch = &gateway.BatchOptions{Path: r.Batch.Path, MaxItems: r.Batch.MaxItems}
			}
		}
		opts.Routes = append(opts.Routes, ro)
	}
	return opts, nil
}

func transportConfig(p config.Proxy) gateway.TransportConfig {
	return gateway.TransportConfig{
		DialTimeout:           p.DialTimeout,
		ResponseHeaderTimeout: p.ResponseHeaderTimeout,
		IdleConnTimeout:       p.IdleConnTimeout,
		MaxIdleConnsPerHost:   p.MaxIdleConnsPerHost,
	}
}

// replayCache is the gateway's cache of completed records, nil when off.
func replayCache(c config.ReplayCache) *idempotency.ReplayCache {
	if c.Off {
		return nil
	}
	return idempotency.NewReplayCache(c.Entries, c.TTL)
}
