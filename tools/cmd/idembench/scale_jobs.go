package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/migrations"
	"github.com/idemgate/idemgate/workers/execution"
)

// jobsSchema is the jobs growth run's schema, apart from the idempotency
// stores' (scaleSchema): migrated at the start, dropped at the end.
const jobsSchema = "idembench_scale_jobs"

// jobsTables are the tables the jobs growth run samples, in report order.
var jobsTables = []string{"jobs", "job_attempts", "job_executions", "job_callbacks", "job_callback_attempts"}

// jobsOptions configure `idembench scale -stores jobs`: final jobs
// written at a steady rate while the worker's retention janitor deletes
// them once they are older than the retention.
type jobsOptions struct {
	duration  time.Duration // the whole run, the backlog's first clean-up included
	rate      float64       // final jobs written per second
	retention time.Duration // jobs_retention and executions_retention
	interval  time.Duration // the janitor's pause (janitor.interval)
	batch     int           // rows per statement (janitor.batch)
	sample    time.Duration // between two samples of the tables
	sizeBound float64       // largest growth of a table's size after the warm-up still called flat
	// vacuum is how often the bench VACUUMs the tables when the server's
	// autovacuum is off, in its place; 0 never does.
	vacuum time.Duration
}

// withDefaults fills what a caller left zero: the defaults of the flags.
func (o jobsOptions) withDefaults() jobsOptions {
	if o.duration == 0 {
		o.duration = 2 * time.Minute
	}
	if o.rate == 0 {
		o.rate = 200
	}
	if o.retention == 0 {
		o.retention = 30 * time.Second
	}
	if o.interval == 0 {
		o.interval = 5 * time.Second
	}
	if o.batch == 0 {
		o.batch = 1000
	}
	if o.sample == 0 {
		o.sample = 5 * time.Second
	}
	if o.sizeBound == 0 {
		o.sizeBound = 0.25
	}
	return o
}

func (o jobsOptions) validate() error {
	var errs []error
	if o.rate < 1 || o.rate > 20_000 {
		errs = append(errs, fmt.Errorf("-jobs-rate %v: want 1..20000", o.rate))
	}
	errs = append(errs,
		outside("-jobs-duration", o.duration, 2*time.Second, 30*time.Minute, "2s..30m"),
		outside("-jobs-retention", o.retention, time.Second, 10*time.Minute, "1s..10m"),
		outside("-jobs-janitor-interval", o.interval, 100*time.Millisecond, o.retention, "100ms..the retention"),
		outside("-jobs-sample", o.sample, 100*time.Millisecond, time.Minute, "100ms..1m"),
		outside("-jobs-vacuum", o.vacuum, 0, 10*time.Minute, "0..10m"))
	if o.sizeBound <= 0 {
		errs = append(errs, fmt.Errorf("-jobs-size-bound %v: want > 0", o.sizeBound))
	}
	return errors.Join(errs...)
}

// warmup is when the tables should have reached their steady state: the
// backlog written at the start is gone after the janitor's first run, one
// retention and interval later every job written since has had its turn,
// and one vacuum cycle later (vacuumEvery: autovacuum's naptime or the
// bench's own -jobs-vacuum) the space of the deleted rows is free again.
func (o jobsOptions) warmup(vacuumEvery time.Duration) time.Duration {
	return o.retention + 2*o.interval + vacuumEvery
}

// jobsGrowth is the report of one jobs growth run.
type jobsGrowth struct {
	Rate      float64 `json:"rate"`
	Retention string  `json:"retention"`
	Interval  string  `json:"janitor_interval"`
	Batch     int     `json:"janitor_batch"`
	Warmup    float64 `json:"warmup_seconds"`
	// Vacuum says who frees the deleted rows' space: autovacuum, or the
	// bench in its place when the server runs without it; Vacuums counts
	// the bench's VACUUM rounds.
	Vacuum  string  `json:"vacuum"`
	Vacuums int64   `json:"bench_vacuums,omitempty"`
	Seconds float64 `json:"seconds"`
	// Written is the final jobs written, the backlog included; Backlog,
	// those written at the start, half of them already past the retention.
	Written int64 `json:"jobs_written"`
	Backlog int64 `json:"backlog"`
	// Deleted counts the janitor's deletions: jobs (with their ledger and
	// callbacks), executions, and ledger rows of tasks without a job.
	Deleted        map[string]int64 `json:"deleted"`
	JanitorBatches int64            `json:"janitor_batches"`
	Samples        []jobsSample     `json:"samples"`
	// Bound is the most jobs rows the steady state holds: the rate times
	// the retention, one interval and one sample, plus the 120 kept jobs.
	Bound  int64         `json:"jobs_rows_bound"`
	Tables []jobsVerdict `json:"tables"`
	Check  jobsCheck     `json:"check"`
}

type jobsSample struct {
	Seconds float64           `json:"seconds"`
	Written int64             `json:"written"`
	Tables  []jobsTableSample `json:"tables"` // in jobsTables' order
}

type jobsTableSample struct {
	Rows        int64 `json:"rows"`
	Bytes       int64 `json:"total_bytes"`
	Dead        int64 `json:"dead_tuples"`
	Autovacuums int64 `json:"autovacuums"`
}

// jobsVerdict sums up one table after the warm-up: its rows and size at
// the first sample after it, their largest and last values, and whether
// its rows stayed bounded and its size flat.
type jobsVerdict struct {
	Table     string  `json:"table"`
	RowsWarm  int64   `json:"rows_at_warmup"`
	RowsMax   int64   `json:"rows_max"`
	RowsLast  int64   `json:"rows_last"`
	BytesWarm int64   `json:"bytes_at_warmup"`
	BytesMax  int64   `json:"bytes_max"`
	BytesLast int64   `json:"bytes_last"`
	Growth    float64 `json:"size_growth"` // (last - at warm-up) / at warm-up
	Unpurged  float64 `json:"unpurged_growth"`
	RowsBound bool    `json:"rows_bounded"`
	Flat      bool    `json:"flat"`
	Note      string  `json:"note,omitempty"`
}

// jobsJanitor is the worker's retention janitor (idemgate worker's
// retentionJanitor) with counters: each batch deletes final jobs past the
// retention with their ledger and callbacks, then final executions past
// it and the ledger rows of tasks that ran without a job, and reports the
// largest count, so that RunJanitor goes on at once while any kind came
// back full.
type jobsJanitor struct {
	jobs       *job.Store
	executions *execution.Store
	retention  time.Duration
	jobsGone   atomic.Int64
	execGone   atomic.Int64
	joblessOff atomic.Int64
	batches    atomic.Int64
}

var _ idempotency.Janitor = (*jobsJanitor)(nil)

func (j *jobsJanitor) DeleteExpired(ctx context.Context, limit int) (int, error) {
	j.batches.Add(1)
	most, err := j.jobs.DeleteFinished(ctx, j.retention, limit, nil)
	if err != nil {
		return 0, err
	}
	j.jobsGone.Add(int64(most))
	n, err := j.executions.DeleteFinished(ctx, j.retention, limit)
	if err != nil {
		return 0, err
	}
	j.execGone.Add(int64(n))
	most = max(most, n)
	if n, err = j.executions.DeleteEndedAttempts(ctx, j.retention, limit); err != nil {
		return 0, err
	}
	j.joblessOff.Add(int64(n))
	return max(most, n), nil
}

// openJobsSchema creates the run's schema afresh (a schema left by an
// interrupted run is the bench's own), migrates it and returns a pool on
// it and the pool of dbURL, which drops it.
func openJobsSchema(ctx context.Context, dbURL string) (pool, admin *pgxpool.Pool, err error) {
	var s services
	if admin, err = s.openSchema(ctx, dbURL, jobsSchema, "DROP SCHEMA IF EXISTS "+jobsSchema+" CASCADE; CREATE SCHEMA "+jobsSchema); err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDBFromPool(s.pool)
	err = migrations.Up(ctx, db)
	_ = db.Close()
	if err != nil {
		s.pool.Close()
		admin.Close()
		return nil, nil, err
	}
	return s.pool, admin, nil
}

// runJobsGrowth writes final jobs into the migrated tables of pool at
// o.rate for o.duration, beside the retention janitor and a sampler of
// the tables, then checks what the janitor left. prefix makes the run's
// keys its own. Progress goes to log.
func runJobsGrowth(ctx context.Context, pool *pgxpool.Pool, o jobsOptions, prefix string, log io.Writer) (*jobsGrowth, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	rep := &jobsGrowth{Rate: o.rate, Retention: o.retention.String(), Interval: o.interval.String(), Batch: o.batch,
		Deleted: map[string]int64{}}
	var (
		autovacuum string
		naptime    int
	)
	if err := pool.QueryRow(ctx, `SELECT current_setting('autovacuum'), (SELECT setting::int FROM pg_settings WHERE name = 'autovacuum_naptime')`).
		Scan(&autovacuum, &naptime); err != nil {
		return rep, fmt.Errorf("read autovacuum's settings: %w", err)
	}
	benchVacuum := autovacuum != "on" && o.vacuum > 0
	vacuumEvery := time.Duration(naptime) * time.Second
	switch {
	case autovacuum == "on":
		rep.Vacuum = fmt.Sprintf("autovacuum (naptime %v)", vacuumEvery)
	case benchVacuum:
		vacuumEvery = o.vacuum
		rep.Vacuum = fmt.Sprintf("autovacuum is off on this server: the bench runs VACUUM on the tables every %v in its place", o.vacuum)
	default:
		vacuumEvery = 0
		rep.Vacuum = "nothing: autovacuum is off on this server and -jobs-vacuum is 0, so the deleted rows' space is never reused"
	}
	rep.Warmup = o.warmup(vacuumEvery).Seconds()
	if err := writeKeptJobs(ctx, pool, prefix); err != nil {
		return rep, err
	}
	// The backlog: a retention's worth of jobs finished over the past two
	// retentions, half of them past it, as a janitor that was stopped for
	// a retention finds them.
	start := time.Now()
	var (
		batches []jobsBatch
		next    int64
	)
	backlog := int64(o.rate * o.retention.Seconds())
	const pieces = 20
	for p := range int64(pieces) {
		n := backlog*(p+1)/pieces - backlog*p/pieces
		if n == 0 {
			continue
		}
		b := jobsBatch{Lo: next, Hi: next + n - 1, Finished: start.Add(-2 * o.retention).Add(time.Duration(p) * 2 * o.retention / pieces)}
		if err := writeFinalJobs(ctx, pool, prefix, b); err != nil {
			return rep, err
		}
		batches, next = append(batches, b), next+n
	}
	rep.Backlog = next
	fmt.Fprintf(log, "jobs: vacuum: %s\n", rep.Vacuum)
	fmt.Fprintf(log, "jobs: %d final jobs of backlog written (half past the %v retention), %d jobs to keep; writing %.0f final jobs/s for %v, janitor every %v, batch %d\n",
		rep.Backlog, o.retention, 7*jobsKeptEach, o.rate, o.duration, o.interval, o.batch)

	jan := &jobsJanitor{jobs: job.NewStore(pool), executions: execution.New(pool), retention: o.retention}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg      sync.WaitGroup
		written atomic.Int64
		wErr    error // the writer's, read after wg.Wait
	)
	written.Store(next)
	wg.Go(func() {
		_ = idempotency.RunJanitor(runCtx, jan, o.interval, o.batch,
			slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	})
	var vacuums atomic.Int64
	if benchVacuum {
		wg.Go(func() {
			t := time.NewTicker(o.vacuum)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
				}
				for _, table := range jobsTables {
					if _, err := pool.Exec(runCtx, "VACUUM "+table); err != nil {
						if runCtx.Err() == nil {
							fmt.Fprintf(log, "jobs: VACUUM %s: %v\n", table, err)
						}
						return
					}
				}
				vacuums.Add(1)
			}
		})
	}
	wg.Go(func() {
		// Whole batches a tick, as many as the rate owes since the start.
		const tick = 200 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		begin := time.Now()
		var due float64
		for {
			select {
			case <-runCtx.Done():
				return
			case now := <-t.C:
				due = o.rate * now.Sub(begin).Seconds()
			}
			n := int64(due) - (next - rep.Backlog)
			if n <= 0 {
				continue
			}
			// The batch's statement is not cancelled with the run: a batch
			// that commits is always one the check knows of.
			b := jobsBatch{Lo: next, Hi: next + n - 1, Finished: time.Now()}
			if err := writeFinalJobs(context.WithoutCancel(runCtx), pool, prefix, b); err != nil {
				if runCtx.Err() == nil {
					wErr = err
					stop()
				}
				return
			}
			batches, next = append(batches, b), next+n
			written.Store(next)
		}
	})

	sampleT := time.NewTicker(o.sample)
	defer sampleT.Stop()
	deadline := time.NewTimer(o.duration)
	defer deadline.Stop()
	take := func() {
		s, err := sampleJobsTables(runCtx, pool)
		if err != nil {
			return
		}
		s.Seconds, s.Written = time.Since(start).Seconds(), written.Load()
		rep.Samples = append(rep.Samples, s)
		fmt.Fprintf(log, "  %5.0f s: %d written; rows %s\n", s.Seconds, s.Written, s.rowsLine())
	}
	take()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-deadline.C:
			// One last sample, unless the ticker's has just been taken.
			if n := len(rep.Samples); n == 0 || time.Since(start).Seconds()-rep.Samples[n-1].Seconds > o.sample.Seconds()/2 {
				take()
			}
			break loop
		case <-sampleT.C:
			take()
		}
	}
	stop()
	wg.Wait()
	stopped := time.Now()
	rep.Seconds = stopped.Sub(start).Seconds()
	rep.Written = next
	rep.JanitorBatches = jan.batches.Load()
	rep.Vacuums = vacuums.Load()
	rep.Deleted["jobs"] = jan.jobsGone.Load()
	rep.Deleted["job_executions"] = jan.execGone.Load()
	rep.Deleted["job_attempts (no job)"] = jan.joblessOff.Load()
	if wErr != nil {
		return rep, wErr
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	var err error
	if rep.Check, err = checkJobs(ctx, pool, prefix, batches, o.retention, o.interval); err != nil {
		return rep, err
	}
	rep.judge(o)
	return rep, nil
}

// sampleJobsTables reads every table's rows, its size with indexes and
// TOAST, and what autovacuum has seen and done.
func sampleJobsTables(ctx context.Context, pool *pgxpool.Pool) (jobsSample, error) {
	var s jobsSample
	for _, t := range jobsTables {
		var ts jobsTableSample
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+t+`), pg_total_relation_size($1::regclass),
	coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass), 0),
	coalesce((SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass), 0)`, t).
			Scan(&ts.Rows, &ts.Bytes, &ts.Dead, &ts.Autovacuums)
		if err != nil {
			return s, fmt.Errorf("sample %s: %w", t, err)
		}
		s.Tables = append(s.Tables, ts)
	}
	return s, nil
}

func (s jobsSample) rowsLine() string {
	var out string
	for i, t := range jobsTables {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d (%s)", t, s.Tables[i].Rows, fmtBytes(s.Tables[i].Bytes))
	}
	return out
}

// judge reads the samples after the warm-up: a table's rows are bounded
// when they never exceed its share of the bound (its rows per job at the
// warm-up, times the jobs bound), and its size is flat when it grew by at
// most o.sizeBound from the warm-up to the end.
func (r *jobsGrowth) judge(o jobsOptions) {
	r.Bound = int64(o.rate*(o.retention+o.interval+o.sample).Seconds()) + 6*jobsKeptEach
	var after []jobsSample
	for _, s := range r.Samples {
		if s.Seconds >= r.Warmup {
			after = append(after, s)
		}
	}
	if len(after) < 2 {
		return
	}
	first, last := after[0], after[len(after)-1]
	jobsWarm := max(first.Tables[0].Rows, 1)
	for i, t := range jobsTables {
		v := jobsVerdict{Table: t, RowsWarm: first.Tables[i].Rows, RowsLast: last.Tables[i].Rows,
			BytesWarm: first.Tables[i].Bytes, BytesLast: last.Tables[i].Bytes}
		for _, s := range after {
			v.RowsMax = max(v.RowsMax, s.Tables[i].Rows)
			v.BytesMax = max(v.BytesMax, s.Tables[i].Bytes)
		}
		perJob := float64(v.RowsWarm) / float64(jobsWarm)
		v.RowsBound = float64(v.RowsMax) <= perJob*float64(r.Bound)*1.1+float64(o.batch)
		if v.BytesWarm > 0 {
			v.Growth = float64(v.BytesLast-v.BytesWarm) / float64(v.BytesWarm)
			// Without a janitor the table would have kept every row
			// written since the warm-up, at the bytes per row it had then.
			if v.RowsWarm > 0 {
				v.Unpurged = float64(last.Written-first.Written) * perJob / float64(v.RowsWarm)
			}
		}
		v.Flat = v.RowsBound && v.Growth <= o.sizeBound
		r.Tables = append(r.Tables, v)
	}
}

// problems lists what the run found wrong: rows the janitor deleted and
// should not have, and tables that grew.
func (r *jobsGrowth) problems() []string {
	out := r.Check.problems()
	for _, v := range r.Tables {
		if !v.Flat {
			out = append(out, fmt.Sprintf("%s did not stay flat after the warm-up: rows %d → max %d (bounded: %t), size %s → %s (%+.0f%%)%s",
				v.Table, v.RowsWarm, v.RowsMax, v.RowsBound, fmtBytes(v.BytesWarm), fmtBytes(v.BytesLast), 100*v.Growth, noteSuffix(v.Note)))
		}
	}
	if len(r.Tables) == 0 && len(r.Samples) > 0 {
		out = append(out, fmt.Sprintf("jobs: fewer than two samples after the %.0f s warm-up: run longer (-jobs-duration)", r.Warmup))
	}
	return out
}

func noteSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func fmtBytes(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// markdown is the jobs section of the scale report.
func (r *jobsGrowth) markdown() string {
	var b []byte
	b = fmt.Appendf(b, "\nJobs tables under the retention janitor: %.0f final jobs/s for %.0f s, retention %s, janitor every %s, batch %d; %d jobs written (%d of them a backlog at the start), deleted: %d jobs, %d executions, %d ledger rows without a job, in %d batches. Vacuum: %s.\n\n",
		r.Rate, r.Seconds, r.Retention, r.Interval, r.Batch, r.Written, r.Backlog,
		r.Deleted["jobs"], r.Deleted["job_executions"], r.Deleted["job_attempts (no job)"], r.JanitorBatches, r.Vacuum)
	b = append(b, "| s | written |"...)
	for _, t := range jobsTables {
		b = fmt.Appendf(b, " %s rows | size |", t)
	}
	b = append(b, "\n|---:|---:|"...)
	for range jobsTables {
		b = append(b, "---:|---:|"...)
	}
	b = append(b, '\n')
	for _, s := range r.Samples {
		b = fmt.Appendf(b, "| %.1f | %d |", s.Seconds, s.Written)
		for _, t := range s.Tables {
			b = fmt.Appendf(b, " %d | %s |", t.Rows, fmtBytes(t.Bytes))
		}
		b = append(b, '\n')
	}
	if len(r.Tables) > 0 {
		b = fmt.Appendf(b, "\nAfter the %.0f s warm-up (retention + 2 janitor intervals + one vacuum cycle); jobs rows bound %d (rate × (retention + interval + sample) + kept jobs):\n\n", r.Warmup, r.Bound)
		b = append(b, "| table | rows at warm-up / max / last | size at warm-up / max / last | size growth | without the janitor | verdict |\n|---|---:|---:|---:|---:|---|\n"...)
		for _, v := range r.Tables {
			verdict := "flat"
			if !v.Flat {
				verdict = "**grew**"
			}
			b = fmt.Appendf(b, "| %s | %d / %d / %d | %s / %s / %s | %+.0f%% | %+.0f%% | %s%s |\n", v.Table, v.RowsWarm, v.RowsMax, v.RowsLast,
				fmtBytes(v.BytesWarm), fmtBytes(v.BytesMax), fmtBytes(v.BytesLast), 100*v.Growth, 100*v.Unpurged, verdict, noteSuffix(v.Note))
		}
	}
	c := r.Check
	b = fmt.Appendf(b, "\nKept as they must be: %d of %d final jobs within the retention, %d of %d unfinished jobs, jobs with a callback in flight and executions in flight; %d ledger or callback rows without their job, %d missing; %d final jobs and %d executions more than two intervals past the retention left (the janitor's lag).\n",
		c.RecentLeft, c.Recent, c.KeptLeft, c.Kept, c.Orphans, c.Missing, c.StaleJobs, c.StaleExecutions)
	return string(b)
}

// jobsOnly reports whether stores asks for the jobs run alone, which
// needs neither idemgate nor the baseline.
func jobsOnly(stores []string) bool {
	return slices.Contains(stores, "jobs") && !slices.ContainsFunc(stores, func(s string) bool { return s != "jobs" })
}

// jobs is the jobs growth run of `idembench scale -stores jobs`, in a
// schema of its own, dropped at the end.
func (r *scaleRun) jobs(ctx context.Context) error {
	pool, admin, err := openJobsSchema(ctx, r.o.bench.dbURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	defer func() {
		pool.Close()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := admin.Exec(cctx, "DROP SCHEMA IF EXISTS "+jobsSchema+" CASCADE"); err != nil {
			fmt.Fprintf(r.log, "idembench scale: dropping schema %s: %v\n", jobsSchema, err)
		}
	}()
	rep, err := runJobsGrowth(ctx, pool, r.o.jobs, r.prefix, r.log)
	r.rep.Jobs = rep
	if err != nil {
		return err
	}
	for _, p := range rep.problems() {
		r.rep.Problems = append(r.rep.Problems, p)
		fmt.Fprintf(r.log, "idembench scale: %s\n", p)
	}
	return nil
}
