package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

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
	RiverPlot string           `json:"river_plot,omitempty"`
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
		fmt.Fprintf(log, "scenario river: workers.HandleTx writing one effect row (job documents kept current) vs River (effect + JobCompleteTx in one transaction), %d jobs per run, concurrency %v\n", o.jobs, o.riverConcurrency)
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
