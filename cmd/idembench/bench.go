package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/proc"
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

// target is a server under load: the baseline or a candidate.
type target struct {
	name   string
	proc   *proc.Proc
	base   string // http://addr
	client *http.Client
}

// pairRecord is one baseline run and the candidate run right after it.
type pairRecord struct {
	Base loadResult `json:"baseline"`
	Cand loadResult `json:"idemgate"`
	// What the store's service did per candidate request.
	DB         *dbCounters      `json:"db,omitempty"`
	RedisCalls map[string]int64 `json:"redis_calls,omitempty"`
	// Fixed is the in-flight scenario's second candidate run, at a fixed
	// rate well below capacity, so its latency is the 409 path's own and
	// not the queueing of a saturated CPU.
	Fixed *loadResult `json:"fixed_rate,omitempty"`
}

// Ratio is candidate req/s over baseline req/s.
func (p pairRecord) Ratio() float64 {
	if p.Base.RPS == 0 {
		return 0
	}
	return p.Cand.RPS / p.Base.RPS
}

// scenarioRecord is every pair of one scenario on one store.
type scenarioRecord struct {
	Scenario string         `json:"scenario"`
	Store    string         `json:"store"`
	Pairs    []pairRecord   `json:"pairs"`
	Waits    map[string]int `json:"pg_waits,omitempty"` // pg_stat_activity samples of the candidate runs
	Samples  int            `json:"pg_wait_samples,omitempty"`
	Profiles []string       `json:"profiles,omitempty"`
}

type benchReport struct {
	runInfo
	Scenarios []scenarioRecord `json:"scenarios"`
	Workers   []workerPair     `json:"workers,omitempty"`
	River     []riverRound     `json:"river,omitempty"`
	Problems  []string         `json:"problems,omitempty"`
}

// runBench is `idembench run`.
func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, _, err := parseBenchFlags("run", args, getenv, stdout)
	if err != nil {
		return err
	}
	if err := pinSelf(o, stderr); err != nil {
		return err
	}
	if err := o.prepare(""); err != nil {
		return err
	}
	if o.private {
		stopPrivate, err := startPrivateServices(ctx, o)
		if err != nil {
			return err
		}
		defer stopPrivate()
	}
	if o.profile && !supportsPprof(o.bin) {
		fmt.Fprintf(stderr, "idembench: %s serve has no --pprof: no profiles\n", o.bin)
		o.profile = false
	}
	rep := &benchReport{runInfo: newRunInfo("run", args, map[string]any{
		"duration": o.duration.String(), "rounds": o.rounds, "concurrency": o.concurrency,
		"warmup": o.warmup.String(), "server_cpu": o.serverCPU, "load_cpu": o.loadCPU,
		"log_level": o.logLevel, "jobs": o.jobs, "worker_concurrency": o.workerConcurrency, "river_concurrency": o.riverConcurrency,
		"inflight_rate": o.inflightRate, "tracing": o.tracing,
	})}
	log := io.MultiWriter(stdout, mustCreate(filepath.Join(o.dir, "progress.log")))
	fmt.Fprintf(log, "idembench: %s; results in %s\n", rep.Machine.String(), o.dir)
	if o.serverCPU >= 0 {
		fmt.Fprintf(log, "idembench: servers pinned to CPU %d, load generator and upstream to CPU %d, Redis and PostgreSQL unpinned\n", o.serverCPU, o.loadCPU)
	}

	needSvc := slices.Contains(o.scenarios, "workers") || slices.Contains(o.scenarios, "river") || slices.Contains(o.stores, "redis") || slices.Contains(o.stores, "postgres")
	var svc *services
	if needSvc {
		if svc, err = openServices(ctx, o.dbURL, o.redisURL, o.redisDB); err != nil {
			return err
		}
		defer svc.close()
		if err := svc.reset(ctx); err != nil {
			return fmt.Errorf("reset bench data: %w", err)
		}
	}

	up := newUpstream(2 * time.Minute)
	upAddr, stopUp, err := serveUpstream(up)
	if err != nil {
		return err
	}
	defer stopUp()
	upURL := "http://" + upAddr
	if o.tracing {
		if o.collector, err = startCollector(); err != nil {
			return err
		}
		defer o.collector.close()
		fmt.Fprintf(log, "idembench: tracing on: idemgate exports OTLP/HTTP to a discarding collector at %s, every request sampled\n", o.collector.addr)
	}

	httpScenarios := slices.DeleteFunc(slices.Clone(o.scenarios), func(s string) bool { return s == "workers" || s == "river" })
	if len(httpScenarios) > 0 {
		base, err := startBaseline(ctx, o, upURL)
		if err != nil {
			return err
		}
		defer base.proc.Stop(syscall.SIGTERM, stopGrace)
		if err := warm(ctx, base, o); err != nil {
			return err
		}
		for _, store := range o.stores {
			if err := ctx.Err(); err != nil {
				return err
			}
			recs, err := benchStore(ctx, o, svc, up, upURL, base, store, httpScenarios, log)
			rep.Scenarios = append(rep.Scenarios, recs...)
			if err != nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("store %s: %v", store, err))
				fmt.Fprintf(log, "idembench: store %s: %v\n", store, err)
				if ctx.Err() != nil {
					return err
				}
			}
		}
	}
	if slices.Contains(o.scenarios, "workers") {
		if err := svc.migrate(ctx, o, upURL); err != nil {
			return err
		}
		fmt.Fprintf(log, "scenario workers: raw asynq vs workers.Handle, %d jobs per run, concurrency %d\n", o.jobs, o.workerConcurrency)
		pairs, err := runWorkerScenario(ctx, o, svc, log)
		rep.Workers = pairs
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("workers: %v", err))
		}
	}
	if slices.Contains(o.scenarios, "river") {
		if err := svc.migrate(ctx, o, upURL); err != nil {
			return err
		}
		fmt.Fprintf(log, "scenario river: workers.Handle writing one effect row (job documents kept current) vs River (effect + JobCompleteTx in one transaction), %d jobs per run, concurrency %v\n", o.jobs, o.riverConcurrency)
		rounds, err := runRiverScenario(ctx, o, svc, log)
		rep.River = rounds
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("river: %v", err))
		}
	}
	if svc != nil {
		if err := svc.reset(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(log, "idembench: cleaning up bench data: %v\n", err)
		}
	}
	rep.Problems = append(rep.Problems, checkExpectations(rep)...)
	rep.Seconds = time.Since(rep.Started).Seconds()
	if err := writeReport(rep, o.dir, stdout); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d problems (see above)", len(rep.Problems))
	}
	return nil
}

func mustCreate(path string) io.Writer {
	f, err := os.Create(path)
	if err != nil {
		return io.Discard
	}
	return f // closed when the process ends
}

// migrate applies the schema in the bench schema, with the idemgate binary.
func (s *services) migrate(ctx context.Context, o *benchOptions, upURL string) error {
	path := filepath.Join(o.dir, "migrate.yaml")
	conf := fmt.Sprintf("store: postgres\ndatabase_url: %q\nadmin_listen: \"\"\nauth: {mode: none}\nroutes:\n  - {name: r, path: /r, upstream: %q}\n", s.dbURL, upURL)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return err
	}
	out, err := execCommand(ctx, []string{o.bin, "migrate", "up", "--config", path}).CombinedOutput()
	if err != nil {
		return fmt.Errorf("idemgate migrate up: %v\n%s", err, out)
	}
	return nil
}

func startBaseline(ctx context.Context, o *benchOptions, upURL string) (*target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := startProc("baseline proxy", o.serverCPU, nil, filepath.Join(o.dir, "baseline.log"), self, "proxy", "-listen", addr, "-upstream", upURL)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, "http://"+addr+"/healthz", 15*time.Second); err != nil {
		p.Stop(syscall.SIGTERM, stopGrace)
		return nil, err
	}
	return &target{name: "baseline", proc: p, base: "http://" + addr, client: loadClient(o.concurrency)}, nil
}

// warm sends unmeasured load so that connections, pools and the runtime
// are in their steady state before the first measured run.
func warm(ctx context.Context, t *target, o *benchOptions) error {
	res, err := attack(ctx, t.client, loadSpec{name: "warmup", target: t.base + "/v1/payments", key: uniqueKeys(fmt.Sprintf("w-%s-%d", t.name, time.Now().UnixNano())), concurrency: o.concurrency, duration: o.warmup})
	if err != nil {
		return err
	}
	if res.Codes[http.StatusCreated] == 0 {
		return fmt.Errorf("%s: warm-up got no 201 (codes %v, errors %v)", t.name, res.Codes, res.Errors)
	}
	return nil
}

// measure runs spec against t and adds what t's process used.
func measure(ctx context.Context, t *target, o *benchOptions, spec loadSpec) (loadResult, error) {
	cpu0, _ := procCPU(t.proc.Pid())
	st0 := readCPUStat()
	t0 := time.Now()
	res, err := attack(ctx, t.client, spec)
	wall := time.Since(t0)
	st1 := readCPUStat()
	cpu1, _ := procCPU(t.proc.Pid())
	res.ServerCPU = cpu1 - cpu0
	res.ServerBusy = busyShare(st0, st1, o.serverCPU)
	res.LoadBusy = busyShare(st0, st1, o.loadCPU)
	if res.ServerBusy >= 0 {
		res.ServerOther = max(0, res.ServerBusy-res.ServerCPU.Seconds()/wall.Seconds())
	}
	if t.proc.Exited() {
		return res, fmt.Errorf("%s exited during the run: %v", t.name, t.proc.Err())
	}
	return res, err
}

// benchStore starts idemgate with one store and runs each HTTP scenario's
// pairs on it.
func benchStore(ctx context.Context, o *benchOptions, svc *services, up *upstream, upURL string, base *target, store string, scenarios []string, log io.Writer) ([]scenarioRecord, error) {
	c, err := startCandidate(ctx, candidateOptions{
		bin: o.bin, store: store, upstream: upURL, dir: o.dir, cpu: o.serverCPU,
		logLevel: o.logLevel, pprof: o.profile, svc: svc, env: o.collector.env(),
	})
	if err != nil {
		return nil, err
	}
	defer c.proc.Stop(syscall.SIGTERM, stopGrace)
	if o.collector != nil {
		defer func() {
			fmt.Fprintf(log, "  collector so far: %d exports, %d spans, %.1f MiB\n", o.collector.exports.Load(), o.collector.spans.Load(), float64(o.collector.bytes.Load())/(1<<20))
		}()
	}
	cand := &target{name: "idemgate-" + store, proc: c.proc, base: "http://" + c.addr, client: loadClient(o.concurrency)}
	if err := warm(ctx, cand, o); err != nil {
		return nil, err
	}
	var recs []scenarioRecord
	for _, sc := range scenarios {
		fmt.Fprintf(log, "scenario %s, store %s: %d pairs of %s runs at %d connections\n", sc, store, o.rounds, o.duration, o.concurrency)
		rec := scenarioRecord{Scenario: sc, Store: store}
		var waits *waitSampler
		if store == "postgres" {
			waits = svc.sampleWaits(ctx, 20*time.Millisecond)
			waits.pause()
		}
		for round := range o.rounds {
			pair, err := runPair(ctx, o, svc, up, base, cand, store, sc, round, waits)
			if err != nil {
				if waits != nil {
					waits.finish()
				}
				recs = append(recs, rec)
				return recs, fmt.Errorf("%s round %d: %w", sc, round+1, err)
			}
			rec.Pairs = append(rec.Pairs, pair)
			noise := ""
			// The baseline has no store, so whatever else ran on its CPU is
			// noise from outside the bench.
			if other := pair.Base.ServerOther; other > 0.1 {
				noise = fmt.Sprintf(" [noisy: other processes took %.0f%% of the server CPU during the baseline run]", other*100)
			}
			fmt.Fprintf(log, "  round %d: baseline %7.0f req/s p99 %-8s | idemgate %7.0f req/s p50 %-8s p99 %-8s | ratio %.2f%s%s\n",
				round+1, pair.Base.RPS, fmtDur(pair.Base.P99), pair.Cand.RPS, fmtDur(pair.Cand.P50), fmtDur(pair.Cand.P99), pair.Ratio(), extraLine(sc, pair), noise)
		}
		if waits != nil {
			rec.Waits, rec.Samples = waits.finish()
		}
		if o.profile {
			files, err := profileRun(ctx, o, up, cand, c, store, sc)
			if err != nil {
				fmt.Fprintf(log, "  profile: %v\n", err)
			}
			rec.Profiles = files
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func extraLine(sc string, p pairRecord) string {
	switch sc {
	case "inflight":
		s := p.Cand.ByCode[http.StatusConflict]
		line := fmt.Sprintf(" | 409s %d p99 %s", s.N, fmtDur(s.P99))
		if p.Fixed != nil {
			f := p.Fixed.ByCode[http.StatusConflict]
			line += fmt.Sprintf(" | at %.0f req/s: p50 %s p99 %s", p.Fixed.RPS, fmtDur(f.P50), fmtDur(f.P99))
		}
		return line
	case "replay":
		return fmt.Sprintf(" | replayed %d/%d", p.Cand.Replayed, p.Cand.Requests)
	}
	return ""
}

// candidateSpec prepares the candidate side of one run of scenario sc and
// returns its load and a function to call after the run.
func candidateSpec(ctx context.Context, o *benchOptions, up *upstream, cand *target, store, sc string, round int, d time.Duration) (loadSpec, func() error, error) {
	id := fmt.Sprintf("%s-%s-%d-%d", sc, store, round, time.Now().UnixNano())
	spec := loadSpec{name: "idemgate", concurrency: o.concurrency, duration: d, target: cand.base + "/v1/payments"}
	after := func() error { return nil }
	switch sc {
	case "unique":
		spec.key = uniqueKeys(id)
	case "replay":
		code, err := post(ctx, cand.client, spec.target, id)
		if err != nil || code != http.StatusCreated {
			return spec, nil, fmt.Errorf("replay: the first request got %d, %v", code, err)
		}
		spec.key = oneKey(id)
	case "inflight":
		spec.target = cand.base + "/v1/payments/slow"
		spec.key = oneKey(id)
		var err error
		if after, err = holdOriginal(ctx, up, spec.target, id); err != nil {
			return spec, nil, err
		}
	}
	return spec, after, nil
}

// holdOriginal sends the first request with key to url, a path the
// upstream holds, and returns once the upstream holds it, so that every
// request with the same key meanwhile finds it in flight (409). release
// lets it go and returns how it ended.
func holdOriginal(ctx context.Context, up *upstream, url, key string) (release func() error, err error) {
	held := up.held.Load()
	done := make(chan error, 1)
	go func() {
		code, err := post(context.WithoutCancel(ctx), &http.Client{Timeout: 3 * time.Minute}, url, key)
		if err == nil && code != http.StatusCreated {
			err = fmt.Errorf("the held original got %d", code)
		}
		done <- err
	}()
	release = func() error {
		up.release()
		return <-done
	}
	deadline := time.Now().Add(10 * time.Second)
	for up.held.Load() <= held {
		if time.Now().After(deadline) {
			_ = release()
			return nil, errors.New("inflight: the original never reached the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return release, nil
}

// baselineSpec is one measured run of the baseline: the requests a
// candidate gets, each with a new key, which a plain proxy ignores.
func baselineSpec(base *target, o *benchOptions) loadSpec {
	return loadSpec{
		name: "baseline", target: base.base + "/v1/payments", key: uniqueKeys(fmt.Sprintf("b-%d", time.Now().UnixNano())),
		concurrency: o.concurrency, duration: o.duration,
	}
}

func runPair(ctx context.Context, o *benchOptions, svc *services, up *upstream, base, cand *target, store, sc string, round int, waits *waitSampler) (pairRecord, error) {
	var p pairRecord
	var err error
	p.Base, err = measure(ctx, base, o, baselineSpec(base, o))
	if err != nil {
		return p, err
	}
	spec, after, err := candidateSpec(ctx, o, up, cand, store, sc, round, o.duration)
	if err != nil {
		return p, err
	}
	var db0 dbCounters
	var calls0 map[string]int64
	switch store {
	case "postgres":
		db0 = svc.dbCounters(ctx)
		waits.resume()
	case "redis":
		calls0 = svc.redisCalls(ctx)
	}
	p.Cand, err = measure(ctx, cand, o, spec)
	switch store {
	case "postgres":
		waits.pause()
		d := svc.dbCounters(ctx).sub(db0)
		p.DB = &d
	case "redis":
		p.RedisCalls = map[string]int64{}
		for k, v := range svc.redisCalls(ctx) {
			if dv := v - calls0[k]; dv > 0 {
				p.RedisCalls[k] = dv
			}
		}
	}
	if err == nil && sc == "inflight" && o.inflightRate > 0 {
		fixed := spec
		fixed.rate = o.inflightRate
		var f loadResult
		f, err = measure(ctx, cand, o, fixed)
		p.Fixed = &f
	}
	if aerr := after(); err == nil && aerr != nil {
		err = aerr
	}
	return p, err
}

// post sends one bench request with key and returns its status.
func post(ctx context.Context, c *http.Client, url, key string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(benchBody))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+benchAPIKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
}

// checkExpectations lists every run whose answers were not the expected
// ones: a benchmark of errors measures nothing.
func checkExpectations(rep *benchReport) []string {
	var probs []string
	for _, sc := range rep.Scenarios {
		want := http.StatusCreated
		if sc.Scenario == "inflight" {
			want = http.StatusConflict
		}
		for i, p := range sc.Pairs {
			for side, r := range map[string]loadResult{"baseline": p.Base, "idemgate": p.Cand} {
				w := want
				if side == "baseline" {
					w = http.StatusCreated
				}
				bad := 0
				for code, n := range r.Codes {
					if code != w {
						bad += n
					}
				}
				if bad > 0 || r.Requests == 0 {
					probs = append(probs, fmt.Sprintf("%s/%s round %d %s: %d of %d answers were not %d (codes %v, errors %v)",
						sc.Scenario, sc.Store, i+1, side, bad, r.Requests+r.Codes[0], w, r.Codes, r.Errors))
				}
			}
			if p.Fixed != nil && (p.Fixed.Codes[http.StatusConflict] != p.Fixed.Requests+p.Fixed.Codes[0] || p.Fixed.Requests == 0) {
				probs = append(probs, fmt.Sprintf("inflight/%s round %d fixed rate: codes %v, errors %v", sc.Store, i+1, p.Fixed.Codes, p.Fixed.Errors))
			}
			if sc.Scenario == "replay" && p.Cand.Replayed != p.Cand.Requests {
				probs = append(probs, fmt.Sprintf("replay/%s round %d: %d of %d answers were replays", sc.Store, i+1, p.Cand.Replayed, p.Cand.Requests))
			}
		}
	}
	return probs
}

// outside is the error of a flag whose value v is not within lo..hi (want
// says the range as the flag is written), or nil. errors.Join drops nils.
func outside[T int | time.Duration](flag string, v, lo, hi T, want string) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %v: want %s", flag, v, want)
	}
	return nil
}
