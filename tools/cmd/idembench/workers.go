package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
)

// The worker scenario compares two asynq servers that differ only in
// their handler: a no-op (what asynq costs by itself) and the same no-op
// behind workers.Handle (execution state, resource lock, fencing token).
// Each run is `idembench worker` as a process of its own, pinned like the
// gateway: it enqueues its jobs first (not timed), then starts the server
// and times it from start until the last job's handler returned.

const benchTask = "bench.noop"

// workerModes are the sides `idembench worker -mode` runs.
var workerModes = []string{"raw", "wrapped", "effect", "effect-completetx", "river"}

// writesEffect says whether mode's handler writes an effect row a job,
// with its job documents kept current.
func writesEffect(mode string) bool { return mode == "effect" || mode == "effect-completetx" }

type benchPayload struct {
	ID string `json:"id"`
}

// workerResult is what `idembench worker` prints as its last line.
type workerResult struct {
	Mode       string  `json:"mode"`
	Jobs       int     `json:"jobs"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// Filled by the harness with -private, zero otherwise: the CPU the
	// PostgreSQL cluster (every backend and auxiliary process) and Redis
	// spent during the timed part.
	PGCPUSeconds    float64 `json:"pg_cpu_seconds"`
	RedisCPUSeconds float64 `json:"redis_cpu_seconds"`
	// The handler's own time per job, from its call to its return, the
	// effect and the job's completion included (handlerTimes).
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Filled by the harness: what PostgreSQL and Redis did for the run
	// (the enqueueing included for Redis).
	DB         *dbCounters      `json:"db,omitempty"`
	RedisCalls map[string]int64 `json:"redis_calls,omitempty"`
	Profile    string           `json:"profile,omitempty"`
}

// runWorkerChild is `idembench worker`.
func runWorkerChild(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stdout)
	mode := fs.String("mode", "raw", "raw (no-op handler), wrapped (workers.Handle around the no-op), effect (workers.HandleTx writing one effect row, job documents kept current), effect-completetx (the same through workers.Handle and Job.CompleteTx) or river (River writing the same row, JobCompleteTx in its transaction)")
	jobs := fs.Int("jobs", 2000, "jobs to enqueue and process")
	concurrency := fs.Int("concurrency", 10, "asynq concurrency (worker.concurrency)")
	queue := fs.String("queue", "idembench", "asynq queue, unique per run")
	redisURL := fs.String("redis-url", "", "redis:// URL (loopback)")
	dbURL := fs.String("database-url", "", "postgres:// URL with the migrations applied (loopback)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed part to this file")
	phase := fs.String("phase", "all", "all; or, run one at a time so that PostgreSQL's counters can be read around the timed part alone: prepare (tables, job documents, enqueueing), run (the timed part), check (every effect written, every job recorded succeeded; effect and river modes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !slices.Contains([]string{"all", "prepare", "run", "check"}, *phase) {
		return fmt.Errorf("worker: -phase %q: want all, prepare, run or check", *phase)
	}
	prepare, work, check := *phase == "all" || *phase == "prepare", *phase == "all" || *phase == "run", *phase == "all" || *phase == "check"
	if !slices.Contains(workerModes, *mode) {
		return fmt.Errorf("worker: -mode %q: want one of %s", *mode, strings.Join(workerModes, ", "))
	}
	if *jobs < 1 || *jobs > 1_000_000 {
		return fmt.Errorf("worker: -jobs %d: want 1..1000000", *jobs)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *mode == "river" {
		return runRiver(ctx, *dbURL, *queue, *jobs, *concurrency, prepare, work, check, stdout)
	}

	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		return fmt.Errorf("worker: -redis-url: %w", err)
	}
	if err := requireLoopback(strings.Split(opt.Addr, ":")[0]); err != nil {
		return err
	}
	// asynq gets clients of its own, as in `idemgate worker`.
	enqRdb := redis.NewClient(opt)
	defer enqRdb.Close()
	srvRdb := redis.NewClient(opt)
	defer srvRdb.Close()

	var pool *pgxpool.Pool
	if *mode != "raw" {
		if pool, err = openBenchPool(ctx, *dbURL); err != nil {
			return err
		}
		defer pool.Close()
	}
	task := func(i int64) *asynq.Task {
		payload, _ := json.Marshal(benchPayload{ID: *queue + "-" + strconv.FormatInt(i, 10)})
		return asynq.NewTask(benchTask, payload, asynq.Queue(*queue), asynq.MaxRetry(job.MaxRetry))
	}
	if prepare {
		if writesEffect(*mode) {
			if err := prepareEffects(ctx, pool, *queue, *jobs); err != nil {
				return err
			}
			task = func(i int64) *asynq.Task { return effectTask(*queue, i) }
		}
		client := asynq.NewClientFromRedisClient(enqRdb)
		if err := enqueueJobs(ctx, client, *jobs, task); err != nil {
			return err
		}
	}
	if !work {
		if check && writesEffect(*mode) {
			return checkEffects(ctx, pool, *queue, *jobs)
		}
		return nil
	}

	var (
		processed atomic.Int64
		allDone   = make(chan struct{})
		doneOnce  sync.Once
	)
	count := func() {
		if processed.Add(1) == int64(*jobs) {
			doneOnce.Do(func() { close(allDone) })
		}
	}
	var h asynq.Handler = asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	if *mode != "raw" {
		lockRdb := redis.NewClient(opt) // the locks' own client, as Deps asks
		defer lockRdb.Close()
		deps := workers.Config{Concurrency: *concurrency}.Deps(pool, lockRdb)
		deps.Lock.Prefix = "idembench:"
		work := func(context.Context, workers.Job[benchPayload]) (string, error) { return "ok", nil }
		if writesEffect(*mode) {
			// As `idemgate worker` runs it: the job document kept
			// current at every status change.
			deps.Jobs = job.NewStore(pool)
		}
		key := func(p benchPayload) string { return "bench:" + p.ID }
		resource := func(p benchPayload) string { return "res:" + p.ID }
		switch *mode {
		case "effect":
			// The effect and the success commit together in the
			// transaction the framework opens for it (HandleTx: three
			// round trips), as River's side commits its effect with
			// JobCompleteTx.
			h = workers.HandleTx(deps, benchTask, key, resource,
				func(ctx context.Context, tx pgx.Tx, j workers.Job[benchPayload]) (string, error) {
					_, err := tx.Exec(ctx, insertEffect, j.Payload.ID)
					return "ok", err
				})
		case "effect-completetx":
			// The same in the function's own transaction, completed
			// with Job.CompleteTx (five round trips).
			h = workers.Handle(deps, benchTask, key, resource, func(ctx context.Context, j workers.Job[benchPayload]) (string, error) {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, insertEffect, j.Payload.ID); err != nil {
						return err
					}
					return j.CompleteTx(ctx, tx, "ok")
				})
				return "ok", err
			})
		default:
			h = workers.Handle(deps, benchTask, key, resource, work)
		}
	}
	var failed atomic.Int64
	times := newHandlerTimes(*jobs)
	counted := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		start := time.Now()
		err := h.ProcessTask(ctx, t)
		times.add(start)
		if err != nil {
			failed.Add(1)
			return err
		}
		count()
		return nil
	})

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, _ := procCPU(os.Getpid())
	start := time.Now()
	stop, err := startWorkerServer(ctx, *mode, srvRdb, opt, *queue, *concurrency, counted)
	if err != nil {
		return err
	}
	select {
	case <-allDone:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	cpu1, _ := procCPU(os.Getpid())
	if err := stop(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("worker: %d of %d jobs done (%d handler errors) before %v", processed.Load(), *jobs, failed.Load(), err)
	}
	_ = asynq.NewInspectorFromRedisClient(enqRdb).DeleteQueue(*queue, true)
	if check && writesEffect(*mode) {
		if err := checkEffects(ctx, pool, *queue, *jobs); err != nil {
			return err
		}
	}
	res := workerResult{
		Mode: *mode, Jobs: *jobs, Seconds: elapsed.Seconds(),
		JobsPerSec: float64(*jobs) / elapsed.Seconds(), CPUSeconds: (cpu1 - cpu0).Seconds(),
	}
	res.P50Ms, res.P99Ms = times.percentiles()
	return json.NewEncoder(stdout).Encode(res)
}

// startWorkerServer starts the asynq server that runs h and returns the
// function that stops it. Raw mode runs a bare asynq server. Wrapped mode
// runs workers.Server, as `idemgate worker` does.
func startWorkerServer(ctx context.Context, mode string, rdb *redis.Client, opt *redis.Options, queue string, concurrency int, h asynq.Handler) (stop func() error, err error) {
	if mode == "raw" {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency:     concurrency,
			Queues:          map[string]int{queue: 1},
			ShutdownTimeout: 5 * time.Second,
			Logger:          quietAsynq{},
			LogLevel:        asynq.ErrorLevel,
		})
		if err := srv.Start(h); err != nil {
			return nil, fmt.Errorf("worker: start: %w", err)
		}
		return func() error { srv.Shutdown(); return nil }, nil
	}
	srv, err := workers.NewServer(
		asynq.RedisClientOpt{Addr: opt.Addr, Username: opt.Username, Password: opt.Password, DB: opt.DB},
		workers.Config{Concurrency: concurrency, Queues: map[string]int{queue: 1}, ShutdownTimeout: 5 * time.Second}, h)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	return func() error { cancel(); return <-done }, nil
}

// enqueueJobs enqueues n jobs with distinct keys and resources, several at
// a time.
func enqueueJobs(ctx context.Context, client *asynq.Client, n int, task func(i int64) *asynq.Task) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				_, err := client.EnqueueContext(ctx, task(i))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker: enqueue: %w", err)
	}
	return nil
}

type quietAsynq struct{}

func (quietAsynq) Debug(...any) {}
func (quietAsynq) Info(...any)  {}
func (quietAsynq) Warn(...any)  {}
func (quietAsynq) Error(args ...any) {
	slog.Error(fmt.Sprint(args...), "component", "asynq")
}
func (quietAsynq) Fatal(args ...any) {
	slog.Error(fmt.Sprint(args...), "component", "asynq")
}

// runWorkerScenario runs raw and wrapped alternately, rounds times each,
// each run a pinned child process.
func runWorkerScenario(ctx context.Context, o *benchOptions, svc *services, log io.Writer) ([]workerPair, error) {
	var pairs []workerPair
	for round := range o.rounds {
		var pair workerPair
		for _, mode := range []string{"raw", "wrapped"} {
			queue := fmt.Sprintf("idembench-%s-%d-%d", mode, round, time.Now().UnixNano())
			outPath := filepath.Join(o.dir, "worker-"+mode+".log")
			profile := ""
			if o.profile && round == o.rounds-1 {
				if err := os.MkdirAll(filepath.Join(o.dir, "profiles"), 0o755); err == nil {
					profile = filepath.Join(o.dir, "profiles", "worker-"+mode+".cpu.pprof")
				}
			}
			res, err := measureWorker(ctx, o, svc, mode, queue, o.workerConcurrency, outPath, profile, false)
			if err != nil {
				return pairs, err
			}
			logWorker(log, mode, round, res)
			if mode == "raw" {
				pair.Raw = res
			} else {
				pair.Wrapped = res
			}
		}
		pairs = append(pairs, pair)
	}
	return pairs, nil
}

// measureWorker runs one side (runWorkerOnce) and adds what PostgreSQL
// and Redis did meanwhile. Phased, the side's preparation (tables, job
// documents, enqueueing) and its final check run as processes of their
// own before and after, outside the counters.
func measureWorker(ctx context.Context, o *benchOptions, svc *services, mode, queue string, concurrency int, outPath, profile string, phased bool) (res workerResult, err error) {
	phase := "all"
	if phased {
		phase = "run"
		if _, err := runWorkerOnce(ctx, o, svc, mode, "prepare", queue, concurrency, outPath, ""); err != nil {
			return workerResult{}, err
		}
	}
	svc.settle(ctx)
	db0, calls0 := svc.dbCounters(ctx), svc.redisCalls(ctx)
	pg0, rdb0 := o.privateCPU()
	if res, err = runWorkerOnce(ctx, o, svc, mode, phase, queue, concurrency, outPath, profile); err != nil {
		return res, err
	}
	if phased {
		// After the counters are read (the deferred call runs last).
		defer func() {
			if _, cerr := runWorkerOnce(ctx, o, svc, mode, "check", queue, concurrency, outPath, ""); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	// After settle: the run's backends have exited and been reaped into
	// the postmaster's cutime and cstime.
	svc.settle(ctx)
	pg1, rdb1 := o.privateCPU()
	if o.pgPid > 0 {
		res.PGCPUSeconds, res.RedisCPUSeconds = (pg1 - pg0).Seconds(), (rdb1 - rdb0).Seconds()
	}
	d := svc.dbCounters(ctx).sub(db0)
	res.DB = &d
	res.RedisCalls = map[string]int64{}
	for k, v := range svc.redisCalls(ctx) {
		if dv := v - calls0[k]; dv > 0 {
			res.RedisCalls[k] = dv
		}
	}
	res.Profile = profile
	return res, nil
}

// logWorker prints one side's run to the progress log.
func logWorker(log io.Writer, mode string, round int, res workerResult) {
	commits, syncs := res.perJob()
	pg, rdb := res.serverCPUPerJob()
	fmt.Fprintf(log, "  workers %-7s round %d: %6.0f jobs/s  (%d jobs in %.2fs, %.0f µs CPU/job, handler p50 %.2f ms p99 %.2f ms; PostgreSQL %.2f commits/job, %.2f WAL syncs/job, %s µs CPU/job; Redis %s µs CPU/job)\n",
		mode, round+1, res.JobsPerSec, res.Jobs, res.Seconds, res.cpuPerJob(), res.P50Ms, res.P99Ms, commits, syncs, pg, rdb)
}

// cpuPerJob is the worker process's CPU per job, in µs.
func (r workerResult) cpuPerJob() float64 {
	if r.Jobs == 0 {
		return 0
	}
	return r.CPUSeconds * 1e6 / float64(r.Jobs)
}

// perJob is PostgreSQL's commits and WAL syncs per job (cluster-wide
// counters: the run's own if nothing else uses the cluster).
func (r workerResult) perJob() (commits, walSyncs float64) {
	if r.DB == nil || r.Jobs == 0 {
		return 0, 0
	}
	return float64(r.DB.Commits) / float64(r.Jobs), float64(r.DB.WALSyncs) / float64(r.Jobs)
}

type workerPair struct {
	Raw     workerResult `json:"raw"`
	Wrapped workerResult `json:"wrapped"`
}

// runWorkerOnce runs `idembench worker` with phase (all, prepare, run or
// check) and returns its result; only all and run print one.
func runWorkerOnce(ctx context.Context, o *benchOptions, svc *services, mode, phase, queue string, concurrency int, logPath, profile string) (workerResult, error) {
	self, err := os.Executable()
	if err != nil {
		return workerResult{}, err
	}
	resultPath := logPath + ".json"
	_ = os.Remove(resultPath)
	out, err := os.Create(resultPath)
	if err != nil {
		return workerResult{}, err
	}
	defer out.Close()
	argv := []string{self, "worker", "-mode", mode, "-jobs", strconv.Itoa(o.jobs),
		"-concurrency", strconv.Itoa(concurrency), "-queue", queue,
		"-timeout", (2*time.Minute + time.Duration(o.jobs)*10*time.Millisecond).String(),
		"-redis-url", svc.redisURL, "-database-url", svc.dbURL, "-phase", phase}
	if profile != "" {
		argv = append(argv, "-cpuprofile", profile)
	}
	if o.serverCPU >= 0 {
		argv = append([]string{"taskset", "-c", strconv.Itoa(o.serverCPU)}, argv...)
	}
	errLog, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return workerResult{}, err
	}
	defer errLog.Close()
	cmd := execCommand(ctx, argv)
	cmd.Stdout, cmd.Stderr = out, errLog
	if err := cmd.Run(); err != nil {
		return workerResult{}, fmt.Errorf("worker %s (%s): %w (log: %s)", mode, phase, err, logPath)
	}
	if phase == "prepare" || phase == "check" {
		return workerResult{}, nil
	}
	b, err := os.ReadFile(resultPath)
	if err != nil {
		return workerResult{}, err
	}
	var res workerResult
	if err := json.Unmarshal(lastLine(b), &res); err != nil {
		return workerResult{}, fmt.Errorf("worker %s: result: %w", mode, err)
	}
	return res, nil
}

func lastLine(b []byte) []byte {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return []byte(s)
}
