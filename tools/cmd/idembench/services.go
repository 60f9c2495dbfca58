package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// benchSchema holds the bench's tables, so that its rows never mix with a
// development database's, and truncating them is safe.
const benchSchema = "idembench"

// services are the Redis and PostgreSQL the Redis and PostgreSQL stores
// and the worker scenario run on. The bench keeps to a Redis logical
// database and a PostgreSQL schema of its own and only ever deletes what
// it wrote there.
type services struct {
	dbURL    string // with search_path set to benchSchema
	redisURL string // with the bench's logical database
	pool     *pgxpool.Pool
	rdb      *redis.Client
}

func openServices(ctx context.Context, dbBase, redisBase string, redisDB int) (*services, error) {
	s := &services{}
	var err error
	if s.redisURL, s.rdb, err = benchRedis(ctx, redisBase, redisDB, 0); err != nil {
		return nil, err
	}
	admin, err := s.openSchema(ctx, dbBase, benchSchema, "CREATE SCHEMA IF NOT EXISTS "+benchSchema)
	if err != nil {
		s.close()
		return nil, err
	}
	admin.Close()
	return s, nil
}

// openSchema points s at schema in the loopback PostgreSQL of base: it
// runs ddl, which creates the schema, on a pool of base's own, and opens
// s.pool with schema as its search_path. It returns the pool of base,
// for the caller to keep or close.
func (s *services) openSchema(ctx context.Context, base, schema, ddl string) (*pgxpool.Pool, error) {
	dbURL, pu, err := schemaURL(base, schema)
	if err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, ddl); err != nil {
		admin.Close()
		return nil, fmt.Errorf("postgres at %s: %w (start it with `make services`)", pu.Host, err)
	}
	if s.pool, err = pgxpool.New(ctx, dbURL); err != nil {
		admin.Close()
		return nil, err
	}
	s.dbURL = dbURL
	return admin, nil
}

// storeServices opens the services an idemgate store needs (none for
// memory) and deletes what earlier runs left there; done deletes what
// this run wrote, even after an interrupt, and closes them.
func storeServices(ctx context.Context, o *benchOptions, store string) (svc *services, done func(), err error) {
	if store == "memory" {
		return nil, func() {}, nil
	}
	if svc, err = openServices(ctx, o.dbURL, o.redisURL, o.redisDB); err != nil {
		return nil, nil, err
	}
	if err := svc.reset(ctx); err != nil {
		svc.close()
		return nil, nil, err
	}
	return svc, func() {
		_ = svc.reset(context.WithoutCancel(ctx))
		svc.close()
	}, nil
}

// benchRedis connects to the loopback Redis of base, on the logical
// database db, and pings it; readTimeout 0 keeps go-redis's default.
func benchRedis(ctx context.Context, base string, db int, readTimeout time.Duration) (string, *redis.Client, error) {
	ru, err := url.Parse(base)
	if err != nil || ru.Scheme != "redis" {
		return "", nil, fmt.Errorf("redis URL %q: want redis://host:port[/db] (one node)", base)
	}
	if err := requireLoopback(ru.Hostname()); err != nil {
		return "", nil, fmt.Errorf("redis: %w", err)
	}
	ru.Path = "/" + strconv.Itoa(db)
	opt, err := redis.ParseURL(ru.String())
	if err != nil {
		return "", nil, err
	}
	if readTimeout > 0 {
		opt.ReadTimeout = readTimeout
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return "", nil, fmt.Errorf("redis at %s: %w (start it with `make services`)", ru.Host, err)
	}
	return ru.String(), rdb, nil
}

// schemaURL is the loopback PostgreSQL URL base with its search_path set
// to schema; it returns the parsed base too, for messages.
func schemaURL(base, schema string) (string, *url.URL, error) {
	pu, err := url.Parse(base)
	if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("database URL %q: want postgres://…", base)
	}
	if err := requireLoopback(pu.Hostname()); err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	withPath := *pu
	q := withPath.Query()
	q.Set("search_path", schema)
	withPath.RawQuery = q.Encode()
	return withPath.String(), pu, nil
}

func (s *services) close() {
	if s.pool != nil {
		s.pool.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
}

// reset deletes what earlier runs left: idempotency records, job state,
// effect rows, River's schema and the Redis keys of the stores, the locks
// and asynq. Tables that do not
// exist yet (before the first migration) are skipped.
func (s *services) reset(ctx context.Context) error {
	for _, table := range []string{"idempotency_records", "job_executions", "fencing_tokens", "fence_accepted", "jobs", "bench_effects"} {
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, benchSchema+"."+table).Scan(&exists); err != nil {
			return err
		}
		if exists {
			if _, err := s.pool.Exec(ctx, "TRUNCATE "+benchSchema+"."+table+" CASCADE"); err != nil {
				return err
			}
		}
	}
	if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+riverSchema+" CASCADE"); err != nil {
		return err
	}
	for _, pattern := range []string{"idemgate:*", "idembench:*", "asynq:*"} {
		if err := s.deleteKeys(ctx, pattern); err != nil {
			return err
		}
	}
	return nil
}

func (s *services) deleteKeys(ctx context.Context, pattern string) error {
	iter := s.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := s.rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return s.rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}

// dbCounters are PostgreSQL's cumulative counters that explain a store's
// cost: commits and WAL (records, bytes, syncs) of the whole cluster.
type dbCounters struct {
	Commits    int64 `json:"commits"`
	WALRecords int64 `json:"wal_records"`
	WALBytes   int64 `json:"wal_bytes"`
	WALSyncs   int64 `json:"wal_syncs"`
}

func (s *services) dbCounters(ctx context.Context) dbCounters {
	var c dbCounters
	_ = s.pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.Commits)
	_ = s.pool.QueryRow(ctx, `SELECT wal_records, wal_bytes::bigint, wal_sync FROM pg_stat_wal`).Scan(&c.WALRecords, &c.WALBytes, &c.WALSyncs)
	return c
}

// settle waits, up to 10 seconds, until the worker processes' connections
// are gone, then a second more: a backend adds its commits and WAL syncs
// to the shared counters when it exits, the WAL writer its own at most
// once a second, and a read before that would count them in the next run.
func (s *services) settle(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, workerAppName).Scan(&n)
		if err != nil || n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

func (c dbCounters) sub(o dbCounters) dbCounters {
	return dbCounters{c.Commits - o.Commits, c.WALRecords - o.WALRecords, c.WALBytes - o.WALBytes, c.WALSyncs - o.WALSyncs}
}

// redisCalls is the number of calls of each Redis command so far.
func (s *services) redisCalls(ctx context.Context) map[string]int64 {
	out := map[string]int64{}
	info, err := s.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return out
	}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// waitSampler tallies what PostgreSQL's active backends wait on, sampling
// pg_stat_activity every interval until stopped. It is the database side
// of a profile: where the store's statements spend their time.
type waitSampler struct {
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	paused  bool // between candidate runs
	tally   map[string]int
	samples int
}

func (w *waitSampler) pause()  { w.setPaused(true) }
func (w *waitSampler) resume() { w.setPaused(false) }

func (w *waitSampler) setPaused(p bool) {
	w.mu.Lock()
	w.paused = p
	w.mu.Unlock()
}

func (s *services) sampleWaits(ctx context.Context, interval time.Duration) *waitSampler {
	ctx, cancel := context.WithCancel(ctx)
	w := &waitSampler{stop: cancel, done: make(chan struct{}), tally: map[string]int{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		const q = `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'`
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			w.mu.Lock()
			paused := w.paused
			w.mu.Unlock()
			if paused {
				continue
			}
			rows, err := s.pool.Query(ctx, q)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return
				}
				continue
			}
			w.mu.Lock()
			w.samples++
			for rows.Next() {
				var ev string
				if rows.Scan(&ev) == nil {
					w.tally[ev]++
				}
			}
			w.mu.Unlock()
			rows.Close()
		}
	}()
	return w
}

// finish stops sampling and returns the tally and the number of samples.
func (w *waitSampler) finish() (map[string]int, int) {
	w.stop()
	<-w.done
	return w.tally, w.samples
}
