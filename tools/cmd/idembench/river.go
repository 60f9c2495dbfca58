package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgate/idemgate/job"
)

// The river scenario puts idemgate's worker next to River
// (github.com/riverqueue/river), a PostgreSQL-only job queue, doing the
// same work: each job writes one effect row into PostgreSQL. idemgate's
// side runs as `idemgate worker` does (workers.HandleTx, the job document
// kept current through job.Store.Follow); River's side writes the
// effect and completes the job in one transaction (river.JobCompleteTx),
// River's own exactly-once pattern, with a 1 ms fetch cooldown. Both use
// the same concurrency (asynq concurrency, River MaxWorkers), the same
// pool size and the same database; River's tables live in a schema of
// their own, dropped and migrated again before each of its runs.

// workerAppName is the application_name of the worker processes'
// connections.
const workerAppName = "idembench worker"

// riverSchema holds River's tables and its side's effect rows.
const riverSchema = "idembench_river"

// effectsDDL creates the table both sides write their effect into, one
// row a job; the schema is the connection's search_path.
const effectsDDL = `CREATE TABLE IF NOT EXISTS bench_effects (
    id      text        PRIMARY KEY,
    done_at timestamptz NOT NULL DEFAULT now()
)`

// insertEffect is the handler's work on both sides. A retried job's
// second write is a no-op.
const insertEffect = `INSERT INTO bench_effects (id) VALUES ($1) ON CONFLICT DO NOTHING`

// benchArgs is River's job: the same payload as the asynq side's.
type benchArgs struct {
	ID string `json:"id"`
}

func (benchArgs) Kind() string { return benchTask }

// effectWorker writes the effect and completes the job in one
// transaction, then counts it.
type effectWorker struct {
	river.WorkerDefaults[benchArgs]
	pool  *pgxpool.Pool
	times *handlerTimes
	count func()
}

func (w *effectWorker) Work(ctx context.Context, j *river.Job[benchArgs]) error {
	start := time.Now()
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertEffect, j.Args.ID); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, j)
		return err
	})
	w.times.add(start)
	if err != nil {
		return err
	}
	w.count()
	return nil
}

// openBenchPool opens the loopback pool both sides use, sized as
// `idemgate worker` opens it: 32 connections whatever the concurrency.
// That holds at concurrency 200 too: no handler on either side holds one
// connection while it waits for another, so the handlers past 32 queue
// for a connection (their handler time includes the wait) and nothing
// deadlocks. A pool of concurrency+8 for both sides was slower on both
// on a 2-core machine (200 PostgreSQL backends contending), so the pool
// stays the same size for both and as the worker ships.
func openBenchPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("worker: -database-url: %w", err)
	}
	if err := requireLoopback(pc.ConnConfig.Host); err != nil {
		return nil, err
	}
	pc.MaxConns = max(pc.MaxConns, 32)
	// The harness waits for these connections to be gone before it reads
	// PostgreSQL's counters (services.settle).
	pc.ConnConfig.RuntimeParams["application_name"] = workerAppName
	return pgxpool.NewWithConfig(ctx, pc)
}

// prepareRiver gives River a fresh schema: dropped, created, migrated,
// with an empty effects table. pool's search_path is riverSchema.
func prepareRiver(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + riverSchema + " CASCADE", "CREATE SCHEMA " + riverSchema, effectsDDL} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("worker: river schema: %w", err)
		}
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: riverSchema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("worker: river migrate: %w", err)
	}
	return nil
}

// runRiver is `idembench worker -mode river`: prepare inserts n jobs into
// a fresh schema, work starts a River client and times it until the last
// job's transaction committed, printing the result, and check makes sure
// every job was completed with its effect.
func runRiver(ctx context.Context, dbURL, queue string, n, concurrency int, prepare, work, check bool, stdout io.Writer) error {
	schemaDB, _, err := schemaURL(dbURL, riverSchema)
	if err != nil {
		return err
	}
	pool, err := openBenchPool(ctx, schemaDB)
	if err != nil {
		return err
	}
	defer pool.Close()
	if prepare {
		if err := prepareRiver(ctx, pool); err != nil {
			return err
		}
	}

	var (
		processed atomic.Int64
		allDone   = make(chan struct{})
		doneOnce  sync.Once
	)
	times := newHandlerTimes(n)
	workers := river.NewWorkers()
	river.AddWorker(workers, &effectWorker{pool: pool, times: times, count: func() {
		if processed.Add(1) == int64(n) {
			doneOnce.Do(func() { close(allDone) })
		}
	}})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:        riverSchema,
		Queues:        map[string]river.QueueConfig{queue: {MaxWorkers: concurrency}},
		FetchCooldown: time.Millisecond,
		Workers:       workers,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return fmt.Errorf("worker: river client: %w", err)
	}
	if prepare {
		if err := insertRiverJobs(ctx, client, queue, n); err != nil {
			return err
		}
	}
	if work {
		cpu0, _ := procCPU(os.Getpid())
		start := time.Now()
		if err := client.Start(ctx); err != nil {
			return fmt.Errorf("worker: river start: %w", err)
		}
		select {
		case <-allDone:
		case <-ctx.Done():
		}
		elapsed := time.Since(start)
		cpu1, _ := procCPU(os.Getpid())
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			return fmt.Errorf("worker: river stop: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("worker: %d of %d River jobs done before %v", processed.Load(), n, err)
		}
		res := workerResult{
			Mode: "river", Jobs: n, Seconds: elapsed.Seconds(),
			JobsPerSec: float64(n) / elapsed.Seconds(), CPUSeconds: (cpu1 - cpu0).Seconds(),
		}
		res.P50Ms, res.P99Ms = times.percentiles()
		defer func() { _ = json.NewEncoder(stdout).Encode(res) }()
	}
	if check {
		return errors.Join(
			checkCount(ctx, pool, n, "effect rows", `SELECT count(*) FROM bench_effects`),
			checkCount(ctx, pool, n, "completed jobs", `SELECT count(*) FROM river_job WHERE state = 'completed'`))
	}
	return nil
}

// checkEffects makes sure every job of idemgate's side wrote its effect
// and its job document says succeeded.
func checkEffects(ctx context.Context, pool *pgxpool.Pool, queue string, n int) error {
	return errors.Join(
		checkCount(ctx, pool, n, "effect rows", `SELECT count(*) FROM bench_effects WHERE starts_with(id, $1 || '-')`, queue),
		checkCount(ctx, pool, n, "succeeded jobs", `SELECT count(*) FROM jobs WHERE queue = $1 AND status = 'succeeded'`, queue))
}

// checkCount fails unless query q counts n.
func checkCount(ctx context.Context, pool *pgxpool.Pool, n int, what, q string, args ...any) error {
	var got int
	if err := pool.QueryRow(ctx, q, args...).Scan(&got); err != nil {
		return fmt.Errorf("worker: check %s: %w", what, err)
	}
	if got != n {
		return fmt.Errorf("worker: check: %d %s, want %d", got, what, n)
	}
	return nil
}

// insertRiverJobs inserts n jobs a thousand at a time (COPY).
func insertRiverJobs(ctx context.Context, client *river.Client[pgx.Tx], queue string, n int) error {
	const batch = 1000
	for i := 0; i < n; i += batch {
		params := make([]river.InsertManyParams, 0, min(batch, n-i))
		for k := i; k < min(i+batch, n); k++ {
			params = append(params, river.InsertManyParams{
				Args:       benchArgs{ID: queue + "-" + strconv.Itoa(k)},
				InsertOpts: &river.InsertOpts{Queue: queue, MaxAttempts: job.MaxRetry + 1},
			})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("worker: river insert: %w", err)
		}
	}
	return nil
}

// prepareEffects makes idemgate's side as `idemgate worker` sees a
// submitted job: an empty effects table, and a queued job document for
// each of the n jobs, whose id the task carries (job.HeaderID), so that
// job.Store.Follow keeps it current. pool's search_path is the bench
// schema, migrated.
func prepareEffects(ctx context.Context, pool *pgxpool.Pool, queue string, n int) error {
	const docs = `
INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
SELECT $1 || '-' || i, 'bench', 'bench', $1 || '-' || i, $2, $1, 'bench:' || $1 || '-' || i,
       jsonb_build_object('id', $1 || '-' || i)
  FROM generate_series(0, $3 - 1) AS i`
	for _, q := range []string{effectsDDL, "TRUNCATE bench_effects"} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("worker: effects table: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, docs, queue, benchTask, n); err != nil {
		return fmt.Errorf("worker: job documents: %w", err)
	}
	return nil
}

// effectTask is job i of queue as the job service submits it: its id in
// the headers and as its TaskID.
func effectTask(queue string, i int64) *asynq.Task {
	id := queue + "-" + strconv.FormatInt(i, 10)
	payload, _ := json.Marshal(benchPayload{ID: id})
	return asynq.NewTaskWithHeaders(benchTask, payload, map[string]string{job.HeaderID: id, job.HeaderTenant: "bench"},
		asynq.TaskID(id), asynq.Queue(queue), asynq.MaxRetry(job.MaxRetry))
}
