package cli

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
	"github.com/idemgate/idemgate/telemetry"
)

// services opens what a process connects to, each once, on first use, and
// pushes its release on the command's closers. The parts of one process
// share them: `idemgate dev` runs the gateway and the worker on one
// PostgreSQL pool and one Redis client.
type services struct {
	cfg     *config.Config
	closers *closers

	pool      *pgxpool.Pool
	redis     redis.UniversalClient
	queueOpt  asynq.RedisConnOpt
	queue     *asynq.Client
	inspector *asynq.Inspector
	store     idempotency.Store
	fair      *job.Fairness
	certs     certs
}

func newServices(cfg *config.Config, c *closers) *services {
	return &services{cfg: cfg, closers: c}
}

// postgres is the pool on database_url.
func (s *services) postgres(ctx context.Context) (*pgxpool.Pool, error) {
	if s.pool != nil {
		return s.pool, nil
	}
	if s.cfg.DatabaseURL == "" {
		return nil, usagef("database_url (or DATABASE_URL) is required")
	}
	pc, err := postgresConfig(s.cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.closers.push(pool.Close)
	if err := checkPooler(ctx, pool); err != nil {
		return nil, err
	}
	s.pool = pool
	return pool, nil
}

// redisClient is the traced client on redis_url.
func (s *services) redisClient() (redis.UniversalClient, error) {
	if s.redis != nil {
		return s.redis, nil
	}
	if s.cfg.RedisURL == "" {
		return nil, usagef("redis_url (or REDIS_URL) is required")
	}
	rdb, err := newRedis(s.cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	s.closers.push(func() { _ = rdb.Close() })
	if err := telemetry.InstrumentRedis(rdb); err != nil {
		return nil, err
	}
	s.redis = rdb
	return rdb, nil
}

// queueConn is asynq's connection to redis_url: each asynq client, server
// and inspector opens its own from it.
func (s *services) queueConn() (asynq.RedisConnOpt, error) {
	if s.queueOpt != nil {
		return s.queueOpt, nil
	}
	if s.cfg.RedisURL == "" {
		return nil, usagef("redis_url (or REDIS_URL) is required")
	}
	opt, err := asynqRedis(s.cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	s.queueOpt = opt
	return opt, nil
}

// queueClient enqueues tasks.
func (s *services) queueClient() (*asynq.Client, error) {
	if s.queue != nil {
		return s.queue, nil
	}
	opt, err := s.queueConn()
	if err != nil {
		return nil, err
	}
	client := asynq.NewClient(opt)
	s.closers.push(func() { _ = client.Close() })
	s.queue = client
	return client, nil
}

// queueInspector reads and changes the queues: sizes, dead letters.
func (s *services) queueInspector() (*asynq.Inspector, error) {
	if s.inspector != nil {
		return s.inspector, nil
	}
	opt, err := s.queueConn()
	if err != nil {
		return nil, err
	}
	inspector := asynq.NewInspector(opt)
	s.closers.push(func() { _ = inspector.Close() })
	s.inspector = inspector
	return inspector, nil
}

// idempotencyStore is the configured store of idempotency records.
func (s *services) idempotencyStore(ctx context.Context) (idempotency.Store, error) {
	if s.store != nil {
		return s.store, nil
	}
	switch s.cfg.Store {
	case "postgres":
		if s.cfg.DatabaseURL == "" {
			return nil, usagef("store postgres needs database_url (or DATABASE_URL)")
		}
		pool, err := s.postgres(ctx)
		if err != nil {
			return nil, err
		}
		direct, err := directConfig(s.cfg)
		if err != nil {
			return nil, err
		}
		var opts []pgstore.Option
		if direct != nil {
			// database_url goes through a transaction pooler, whose
			// backend ids are its own: an ambiguous write cannot be
			// settled by ending its backend.
			opts = append(opts, pgstore.WithListenConfig(direct), pgstore.WithResolveTimeout(0))
		}
		st := pgstore.New(pool, opts...)
		s.closers.push(st.Close)
		s.store = st
	case "redis":
		if s.cfg.RedisURL == "" {
			return nil, usagef("store redis needs redis_url (or REDIS_URL)")
		}
		rdb, err := s.redisClient()
		if err != nil {
			return nil, err
		}
		var opts []redisstore.Option
		if w := s.cfg.Idempotency.RedisWait; w.On() {
			opts = append(opts, redisstore.WithWait(w.Replicas, w.Timeout))
		}
		st := redisstore.New(rdb, opts...)
		s.closers.push(func() { _ = st.Close() })
		s.store = st
	default:
		m := s.cfg.Idempotency.Memory
		s.store = memstore.New(memstore.WithMaxBytes(m.MaxBytes), memstore.WithMaxBytesPerTenant(m.MaxBytesPerTenant))
	}
	return s.store, nil
}

// openJobQueue opens what the operator commands on jobs need (cmd names
// the command in the usage error): the job records and the queue, to
// enqueue and to inspect. Their release is pushed on cl.
func openJobQueue(ctx context.Context, cfg *config.Config, cl *closers, cmd string) (*job.Submitter, *asynq.Inspector, error) {
	if cfg.DatabaseURL == "" || cfg.RedisURL == "" {
		return nil, nil, usagef("%s: database_url and redis_url are required", cmd)
	}
	svc := newServices(cfg, cl)
	pool, err := svc.postgres(ctx)
	if err != nil {
		return nil, nil, err
	}
	client, err := svc.queueClient()
	if err != nil {
		return nil, nil, err
	}
	inspector, err := svc.queueInspector()
	if err != nil {
		return nil, nil, err
	}
	sub := job.NewSubmitter(pool, client)
	sub.Shards = cfg.Shards()
	if sub.Fairness, err = svc.fairness(); err != nil {
		return nil, nil, err
	}
	return sub, inspector, nil
}

// fairness is the fairness pools on redis_url, or nil when none is
// declared: Submitters file the pooled jobs in them, and the worker runs
// their dispatchers. One process shares one, so that a submit in dev
// wakes its worker's dispatchers.
func (s *services) fairness() (*job.Fairness, error) {
	if s.fair != nil || len(s.cfg.FairPools()) == 0 {
		return s.fair, nil
	}
	rdb, err := s.redisClient()
	if err != nil {
		return nil, err
	}
	f, err := job.NewFairness(rdb, s.cfg.FairPools(), s.cfg.Jobs())
	if err != nil {
		return nil, usagef("%v", err)
	}
	f.Shards = s.cfg.Shards()
	s.fair = f
	return f, nil
}
