package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// soakSample is the gateway's state at one moment of the soak.
type soakSample struct {
	At         float64 `json:"at_seconds"` // since the measured part began
	Quiesced   bool    `json:"quiesced"`   // taken with no load and no idle connections
	RSS        int64   `json:"rss_bytes"`  // VmRSS from /proc
	PromRSS    float64 `json:"process_resident_memory_bytes"`
	Goroutines float64 `json:"go_goroutines"`
	HeapInuse  float64 `json:"go_memstats_heap_inuse_bytes"`
}

type soakReport struct {
	Machine  machineInfo  `json:"machine"`
	Command  string       `json:"command"`
	Store    string       `json:"store"`
	Rate     int          `json:"rate"`
	Duration string       `json:"duration"`
	Samples  []soakSample `json:"samples"`
	Load     loadResult   `json:"load"`
	Verdict  string       `json:"verdict"`
	Flat     bool         `json:"flat"`
}

// runSoak is `idembench soak`: idemgate under a fixed request rate for a
// long time. Most requests carry a new key; one in ten replays an earlier
// key and one in twenty reuses an earlier key with another body (422), so
// the stored-response and refusal paths run too. It samples RSS and
// goroutines every interval and says whether they stayed flat.
func runSoak(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o := &benchOptions{}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "length of the measured part")
	fs.DurationVar(&o.warmup, "warmup", 30*time.Second, "load at the same rate before the first sample")
	rate := fs.Int("rate", 500, "requests per second (open loop)")
	interval := fs.Duration("interval", 30*time.Second, "time between samples")
	store := fs.String("store", "postgres", "idemgate store: memory, redis or postgres")
	fs.IntVar(&o.concurrency, "c", 256, "most connections the open loop may use")
	o.harnessFlags(fs, getenv, "bench/out/soak-TIMESTAMP", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	if *store != "memory" && *store != "redis" && *store != "postgres" {
		errs = append(errs, fmt.Errorf("-store %q: want memory, redis or postgres", *store))
	}
	if *rate < 1 || *rate > 20000 {
		errs = append(errs, fmt.Errorf("-rate %d: want 1..20000", *rate))
	}
	if o.duration < 10*time.Second || o.duration > 2*time.Hour {
		errs = append(errs, fmt.Errorf("-duration %s: want 10s..2h", o.duration))
	}
	if *interval < time.Second {
		errs = append(errs, fmt.Errorf("-interval %s: want at least 1s", *interval))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := pinSelf(o, stderr); err != nil {
		return err
	}
	if err := o.prepare("soak"); err != nil {
		return err
	}
	rep := &soakReport{Machine: readMachine(), Command: "idembench soak " + strings.Join(args, " "), Store: *store, Rate: *rate, Duration: o.duration.String()}

	svc, closeSvc, err := storeServices(ctx, o, *store)
	if err != nil {
		return err
	}
	defer closeSvc()
	up := newUpstream(time.Minute)
	upAddr, stopUp, closeUpIdle, err := serveUpstreamIdle(up)
	if err != nil {
		return err
	}
	defer stopUp()
	c, err := startCandidate(ctx, candidateOptions{bin: o.bin, store: *store, upstream: "http://" + upAddr, dir: o.dir, cpu: o.serverCPU, logLevel: o.logLevel, svc: svc})
	if err != nil {
		return err
	}
	defer c.proc.Stop(syscall.SIGTERM, stopGrace)
	client := loadClient(o.concurrency)
	fmt.Fprintf(stdout, "idembench soak: %s; idemgate store %s at %d req/s for %s after a %s warm-up; results in %s\n",
		rep.Machine.String(), *store, *rate, o.duration, o.warmup, o.dir)

	prefix := fmt.Sprintf("soak-%d", time.Now().UnixNano())
	spec := func(d time.Duration, p string) loadSpec {
		return loadSpec{name: "soak", target: c.url("/v1/payments"), concurrency: o.concurrency, rate: *rate, duration: d,
			key: func(n uint64) string { return p + "-" + strconv.FormatUint(soakBase(n), 36) },
			body: func(n uint64) []byte {
				if n >= 5007 && n%20 == 0 {
					return []byte(`{"amount_cents":9999,"currency":"EUR"}`)
				}
				return []byte(benchBody)
			}}
	}
	if _, err := attack(ctx, client, spec(o.warmup, prefix+"-w")); err != nil {
		return err
	}
	sample := func(start time.Time) soakSample {
		s := soakSample{At: time.Since(start).Seconds()}
		if start.IsZero() {
			s.At = 0
		}
		s.RSS, _ = procRSS(c.proc.Pid())
		if g, err := c.gauges(ctx, "go_goroutines", "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes"); err == nil {
			s.Goroutines, s.PromRSS, s.HeapInuse = g["go_goroutines"], g["process_resident_memory_bytes"], g["go_memstats_heap_inuse_bytes"]
		}
		fmt.Fprintf(stdout, "  %6.0fs  RSS %6.1f MiB  heap in use %6.1f MiB  goroutines %4.0f\n", s.At, float64(s.RSS)/(1<<20), s.HeapInuse/(1<<20), s.Goroutines)
		return s
	}
	// quiesced samples the gateway with no request running and every
	// connection to it and from it closed, so that the goroutine count
	// compares like with like: live connections each hold goroutines, and
	// how many the open loop keeps open varies with latency.
	quiesced := func(start time.Time) soakSample {
		client.CloseIdleConnections()
		closeUpIdle()
		time.Sleep(2 * time.Second)
		s := sample(start)
		s.Quiesced = true
		return s
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		stopped = make(chan struct{})
	)
	fmt.Fprintln(stdout, "  after the warm-up, quiesced:")
	rep.Samples = append(rep.Samples, quiesced(time.Time{}))
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(*interval)
		defer t.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				s := sample(start)
				mu.Lock()
				rep.Samples = append(rep.Samples, s)
				mu.Unlock()
			}
		}
	})
	res, err := attack(ctx, client, spec(o.duration, prefix))
	close(stopped)
	wg.Wait()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "  after the load, quiesced:")
	rep.Samples = append(rep.Samples, quiesced(start))
	rep.Load = res
	rep.Flat, rep.Verdict = soakVerdict(rep.Samples)

	var bad []string
	for code, n := range res.Codes {
		if code != http.StatusCreated && code != http.StatusUnprocessableEntity {
			bad = append(bad, fmt.Sprintf("%d×%d", n, code))
		}
	}
	// The verdict below matters more than whether the files were saved.
	_ = saveResults(stdout, o.dir, "soak", rep.markdown(), rep)
	if len(bad) > 0 {
		return fmt.Errorf("soak: unexpected answers %s (errors %v)", strings.Join(bad, ", "), res.Errors)
	}
	if !rep.Flat {
		return fmt.Errorf("soak: %s", rep.Verdict)
	}
	return nil
}

// soakBase maps request n to the request whose key it uses: one in ten
// replays the key of a request about 5,000 earlier (10 s at the default
// rate: long completed unless something is badly wrong), and one in twenty
// sends such a key with another body. Both point at requests that had
// keys of their own.
func soakBase(n uint64) uint64 {
	switch {
	case n >= 5003 && n%10 == 5:
		return n - 5003
	case n >= 5007 && n%20 == 0:
		return n - 5007
	}
	return n
}

// soakVerdict judges the soak. Goroutines: the quiesced sample after the
// load against the one before it, both without any connection, so any
// difference is goroutines that outlived their requests. RSS: the live
// samples at the end against those at the start of the measured part
// (medians of three), since Go's RSS follows the heap's goal under load
// and shrinks only lazily afterwards; a small margin is allowed.
func soakVerdict(s []soakSample) (bool, string) {
	if len(s) < 8 || !s[0].Quiesced || !s[len(s)-1].Quiesced {
		return false, "not enough samples (run for at least 4 intervals)"
	}
	q0, q1 := s[0], s[len(s)-1]
	live := s[1 : len(s)-1]
	rss := func(l []soakSample) float64 {
		v := make([]float64, len(l))
		for i, x := range l {
			v[i] = float64(x.RSS)
		}
		return median(v)
	}
	head, tail := rss(live[:3]), rss(live[len(live)-3:])
	rssGrowth := (tail - head) / max(head, 1)
	goGrowth := q1.Goroutines - q0.Goroutines
	flat := rssGrowth <= 0.15 && goGrowth <= max(5, q0.Goroutines*0.1)
	return flat, fmt.Sprintf("RSS under load %.1f → %.1f MiB (%+.0f%%, medians of the first and last three samples), goroutines at rest %.0f → %.0f (%+.0f) over %.0fs",
		head/(1<<20), tail/(1<<20), rssGrowth*100, q0.Goroutines, q1.Goroutines, goGrowth, q1.At)
}

func (rep *soakReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## idembench soak\n\n- machine: %s\n- command: `%s`\n- store %s, %d req/s for %s (%d requests; p50 %s, p99 %s; codes %v)\n\n",
		rep.Machine.String(), strings.TrimSpace(rep.Command), rep.Store, rep.Rate, rep.Duration, rep.Load.Requests, fmtDur(rep.Load.P50), fmtDur(rep.Load.P99), rep.Load.Codes)
	b.WriteString("| at | RSS (VmRSS) | heap in use | goroutines |\n|---:|---:|---:|---:|\n")
	for _, s := range rep.Samples {
		at := fmt.Sprintf("%.0fs", s.At)
		if s.Quiesced {
			at += " (quiesced)"
		}
		fmt.Fprintf(&b, "| %s | %.1f MiB | %.1f MiB | %.0f |\n", at, float64(s.RSS)/(1<<20), s.HeapInuse/(1<<20), s.Goroutines)
	}
	flat := "flat"
	if !rep.Flat {
		flat = "**not flat**"
	}
	fmt.Fprintf(&b, "\nVerdict: %s — %s.\n", flat, rep.Verdict)
	return b.String()
}
