package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/e2e/chaos"
)

// riverRound is one round of the river scenario at one concurrency:
// idemgate's side and River's, run one after the other.
type riverRound struct {
	Concurrency int          `json:"concurrency"`
	Round       int          `json:"round"`
	Idemgate    workerResult `json:"idemgate"`
	River       workerResult `json:"river"`
}

// runRiverScenario runs, at each -river-concurrency, -rounds rounds of
// idemgate's side (-mode effect) and River's (-mode river), each a pinned
// child process of its own so that its CPU time is its own (/proc/PID/stat
// before and after the timed part). The order flips every round, so
// neither side always runs on the warmer database.
func runRiverScenario(ctx context.Context, o *benchOptions, svc *services, log io.Writer) ([]riverRound, error) {
	var out []riverRound
	for _, conc := range o.riverConcurrency {
		for round := range o.rounds {
			r := riverRound{Concurrency: conc, Round: round + 1}
			modes := []string{"effect", "river"}
			if round%2 == 1 {
				modes = []string{"river", "effect"}
			}
			for _, mode := range modes {
				queue := fmt.Sprintf("idembench_%s_%d_%d", mode, conc, time.Now().UnixNano())
				outPath := filepath.Join(o.dir, "worker-"+mode+".log")
				res, err := measureWorker(ctx, o, svc, mode, queue, conc, outPath, "", true)
				if err != nil {
					return out, err
				}
				logWorker(log, fmt.Sprintf("%s c=%d", mode, conc), round, res)
				if mode == "river" {
					r.River = res
				} else {
					r.Idemgate = res
				}
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// parseConcurrencies reads a comma-separated list of concurrencies, each
// 1..1000.
func parseConcurrencies(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("%q: want 1..1000", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty: want e.g. 10,50")
	}
	return out, nil
}

// riverTable is the river scenario's report: one row a round, the ratio
// being idemgate's jobs/s over River's.
func riverTable(rounds []riverRound) string {
	var b strings.Builder
	b.WriteString("Each round runs idemgate's worker as `idemgate worker` runs it (workers.HandleTx: the effect and the job's success commit in the transaction the framework opens, job documents kept current) and River (effect + `JobCompleteTx` in one transaction, 1 ms fetch cooldown), each handler writing one effect row into PostgreSQL, at the same concurrency and pool size, on the same database; the order flips every round; the jobs are enqueued before the clock starts. Worker CPU is the worker process's own (/proc/PID/stat); with -private, PostgreSQL's is the whole cluster's (backends included) and Redis's the server's. PostgreSQL commits and WAL syncs are cluster-wide per job. A handler's time runs from its call to its return, the effect and the job's completion included: idemgate's p50 / p99, then River's.\n\n")
	b.WriteString("| concurrency | round | idemgate jobs/s | River jobs/s | ratio | worker CPU µs/job (idemgate / River) | PostgreSQL CPU µs/job (idemgate / River) | Redis CPU µs/job (idemgate / River) | PG commits/job (idemgate / River) | WAL syncs/job (idemgate / River) | handler p50 / p99 ms (idemgate / River) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rounds {
		ic, is := r.Idemgate.perJob()
		rc, rs := r.River.perJob()
		ratio := "–"
		if r.River.JobsPerSec > 0 {
			ratio = fmt.Sprintf("%.2f×", r.Idemgate.JobsPerSec/r.River.JobsPerSec)
		}
		ipg, irdb := r.Idemgate.serverCPUPerJob()
		rpg, rrdb := r.River.serverCPUPerJob()
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f | %s | %.0f / %.0f | %s / %s | %s / %s | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f · %.2f / %.2f |\n",
			r.Concurrency, r.Round, r.Idemgate.JobsPerSec, r.River.JobsPerSec, ratio,
			r.Idemgate.cpuPerJob(), r.River.cpuPerJob(), ipg, rpg, irdb, rrdb, ic, rc, is, rs,
			r.Idemgate.P50Ms, r.Idemgate.P99Ms, r.River.P50Ms, r.River.P99Ms)
	}
	b.WriteString("\n")
	return b.String()
}

// startPrivateServices starts a PostgreSQL cluster (initdb, PostgreSQL's
// durable defaults) and a Redis without persistence, on free loopback
// ports with their files in a temporary directory, and points o at
// them. The returned function stops both.
func startPrivateServices(ctx context.Context, o *benchOptions) (stop func(), err error) {
	// A temporary directory: as root, PostgreSQL runs as the postgres
	// user, who may not be able to reach the run's directory.
	dir, err := os.MkdirTemp("", "idembench-private-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	pg, err := chaos.StartPostgres(ctx, filepath.Join(dir, "postgres"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("private postgres: %w", err)
	}
	rdb, err := chaos.StartRedis(ctx, filepath.Join(dir, "redis"), false)
	if err != nil {
		pg.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("private redis: %w", err)
	}
	o.dbURL, o.redisURL = chaos.URL(pg.Addr(), "postgres"), rdb.URL()
	o.pgPid, o.redisPid = pg.Pid(), rdb.Pid()
	return func() { rdb.Close(); pg.Close(); _ = os.RemoveAll(dir) }, nil
}
