package main

// The flags of `idembench run` and of the commands that share its harness,
// and preparing the run they describe (output directory, CPU pinning).

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// benchOptions are the flags of `idembench run`.
type benchOptions struct {
	quick             bool
	duration          time.Duration
	warmup            time.Duration
	rounds            int
	concurrency       int
	stores            []string
	scenarios         []string
	bin               string
	dir               string
	pin               bool
	serverCPU         int // -1: not pinned
	loadCPU           int
	logLevel          string
	profile           bool
	profileSeconds    int
	jobs              int
	workerConcurrency int
	riverConcurrency  []int
	private           bool
	dbURL, redisURL   string
	pgPid, redisPid   int // with -private: the postmaster's and redis-server's
	redisDB           int
	inflightRate      int
	tracing           bool
	collector         *collector // with -tracing: where idemgate exports
}

// defaultScenarios run when -scenarios is not given; allScenarios adds
// the ones run only on request (river: a few minutes, and a database
// schema of River's own).
var (
	defaultScenarios = []string{"unique", "replay", "inflight", "workers"}
	allScenarios     = append(slices.Clone(defaultScenarios), "river")
)

func parseBenchFlags(name string, args []string, getenv func(string) string, stdout io.Writer) (*benchOptions, *flag.FlagSet, error) {
	o := &benchOptions{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.BoolVar(&o.quick, "quick", false, "the ~2-minute preset: -duration 2s -rounds 2 -warmup 1s -jobs 2000")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured run")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "unmeasured load on each server before its first run")
	fs.IntVar(&o.rounds, "rounds", 3, "baseline/candidate pairs per scenario and store")
	fs.IntVar(&o.concurrency, "c", 64, "concurrent connections (closed loop)")
	stores := fs.String("stores", "memory,redis,postgres", "idemgate stores to measure")
	scenarios := fs.String("scenarios", strings.Join(defaultScenarios, ","), "scenarios to run: "+strings.Join(allScenarios, ", "))
	o.harnessFlags(fs, getenv, "bench/out/TIMESTAMP", "; the bench uses a schema of its own, "+benchSchema, "")
	fs.BoolVar(&o.profile, "profile", false, "after the measured runs, one more run per scenario and store with CPU and allocation profiles of idemgate (needs serve --pprof)")
	fs.IntVar(&o.profileSeconds, "profile-seconds", 0, "length of each profiled run in seconds (default the -duration)")
	fs.IntVar(&o.jobs, "jobs", 10000, "jobs per worker run")
	fs.IntVar(&o.workerConcurrency, "worker-concurrency", 10, "asynq concurrency of the worker runs (worker.concurrency)")
	riverConc := fs.String("river-concurrency", "10,50", "the river scenario's concurrencies (asynq concurrency and River MaxWorkers), each run -rounds times")
	fs.BoolVar(&o.private, "private", false, "start a private PostgreSQL cluster and Redis on free loopback ports for the run, instead of -database-url and -redis-url, so that commits and WAL syncs are the run's alone")
	fs.IntVar(&o.inflightRate, "inflight-rate", 1000, "the in-flight scenario also measures the 409s at this fixed rate (open loop; 0: off)")
	fs.BoolVar(&o.tracing, "tracing", false, "run idemgate with OTLP trace export on, every request sampled, to a collector in the harness that discards what it gets")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		for name, v := range map[string]string{"duration": "2s", "rounds": "2", "warmup": "1s", "jobs": "2000"} {
			if !set[name] {
				_ = fs.Set(name, v)
			}
		}
	}
	o.stores = splitList(*stores)
	o.scenarios = splitList(*scenarios)
	var errs []error
	for _, s := range o.stores {
		if s != "memory" && s != "redis" && s != "postgres" {
			errs = append(errs, fmt.Errorf("-stores: %q is not memory, redis or postgres", s))
		}
	}
	for _, s := range o.scenarios {
		if !slices.Contains(allScenarios, s) {
			errs = append(errs, fmt.Errorf("-scenarios: %q is not one of %s", s, strings.Join(allScenarios, ", ")))
		}
	}
	var err error
	if o.riverConcurrency, err = parseConcurrencies(*riverConc); err != nil {
		errs = append(errs, fmt.Errorf("-river-concurrency: %w", err))
	}
	errs = append(errs,
		outside("-rounds", o.rounds, 1, 20, "1..20"),
		outside("-jobs", o.jobs, 1, 1_000_000, "1..1000000"),
		outside("-duration", o.duration, time.Second, 5*time.Minute, "1s..5m"),
		outside("-c", o.concurrency, 1, 1024, "1..1024"))
	if o.profileSeconds == 0 {
		o.profileSeconds = max(int(o.duration.Seconds()), 1)
	}
	return o, fs, errors.Join(errs...)
}

// harnessFlags registers the flags every command that starts idemgate
// shares: the binary, the output directory (default bench/out/NAME-TIMESTAMP,
// or a timestamp alone for run), CPU pinning, idemgate's log level, and the
// loopback PostgreSQL and Redis the command uses, with what it does there
// (dbNote, redisNote).
func (o *benchOptions) harnessFlags(fs *flag.FlagSet, getenv func(string) string, outDefault, dbNote, redisNote string) {
	fs.StringVar(&o.bin, "idemgate", "bin/idemgate", "the idemgate binary (make build)")
	fs.StringVar(&o.dir, "out", "", "directory for results, configs and logs (default "+outDefault+")")
	fs.BoolVar(&o.pin, "pin", true, "pin each server to one CPU and the load generator to another with taskset")
	fs.IntVar(&o.serverCPU, "server-cpu", 0, "the CPU the server under test runs on")
	fs.IntVar(&o.loadCPU, "load-cpu", 1, "the CPU the load generator and the upstream run on")
	fs.StringVar(&o.logLevel, "log-level", "warn", "idemgate log level (info writes one access log line per request)")
	fs.StringVar(&o.dbURL, "database-url", or(getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL (loopback)"+dbNote)
	fs.StringVar(&o.redisURL, "redis-url", or(getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"), "Redis (loopback, one node)")
	fs.IntVar(&o.redisDB, "redis-db", 15, "the Redis logical database used instead of the URL's"+redisNote)
}

// prepare makes the output directory, bench/out/NAME-TIMESTAMP unless -out
// names one (a timestamp alone when name is empty), and checks that the
// idemgate binary is there (unless the command starts none: bin "").
func (o *benchOptions) prepare(name string) error {
	if o.dir == "" {
		stamp := time.Now().Format("20060102-150405")
		if name != "" {
			stamp = name + "-" + stamp
		}
		o.dir = filepath.Join("bench", "out", stamp)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	if o.bin == "" {
		return nil
	}
	if _, err := os.Stat(o.bin); err != nil {
		return fmt.Errorf("%s: %w (run `make build`)", o.bin, err)
	}
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// pinSelf makes the harness run on the load CPU: it re-executes itself
// under taskset once. When pinning is impossible (one CPU, no taskset) it
// turns pinning off and says so.
func pinSelf(o *benchOptions, stderr io.Writer) error {
	if !o.pin {
		o.serverCPU = -1
		return nil
	}
	n := runtime.NumCPU()
	taskset, err := exec.LookPath("taskset")
	switch {
	case os.Getenv("IDEMBENCH_PINNED") != "":
		return nil
	case n < 2 || err != nil || o.serverCPU == o.loadCPU || max(o.serverCPU, o.loadCPU) >= n:
		fmt.Fprintf(stderr, "idembench: not pinning (%d CPUs, taskset: %v): servers and load share the CPUs\n", n, err)
		o.serverCPU = -1
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	argv := append([]string{"taskset", "-c", strconv.Itoa(o.loadCPU), self}, os.Args[1:]...)
	return syscall.Exec(taskset, argv, append(os.Environ(), "IDEMBENCH_PINNED=1"))
}

// outside is the error of a flag whose value v is not within lo..hi (want
// says the range as the flag is written), or nil. errors.Join drops nils.
func outside[T int | time.Duration](flag string, v, lo, hi T, want string) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %v: want %s", flag, v, want)
	}
	return nil
}
