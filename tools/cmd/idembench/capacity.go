package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// capacityOptions are the flags of `idembench capacity`.
type capacityOptions struct {
	benchOptions
	steps     []int
	store     string
	shedLimit int
	probes    int
	nofile    uint64
	pause     time.Duration
}

// capacityStep is one server holding a number of requests at the slow
// upstream.
type capacityStep struct {
	Target     int     `json:"target"`    // requests opened and held
	Held       int64   `json:"held"`      // of them, waiting at the upstream
	Shed       int64   `json:"shed"`      // of them, answered 503
	Failed     int64   `json:"failed"`    // of them, not connected, or answered otherwise while held (a 502)
	RSS        int64   `json:"rss_bytes"` // VmRSS of the server
	Goroutines float64 `json:"go_goroutines,omitempty"`
	InFlight   float64 `json:"idemgate_requests_in_flight,omitempty"`
	FDs        int     `json:"open_fds"`
	// ProbeP50 and ProbeMax are the latency of one fresh request sent
	// while the others are held; ProbeCode is the status most probes got.
	ProbeP50  time.Duration `json:"probe_p50_ns"`
	ProbeMax  time.Duration `json:"probe_max_ns"`
	ProbeCode int           `json:"probe_code"`
}

// capacityServer is every step of one server.
type capacityServer struct {
	Name        string         `json:"name"`
	MaxInFlight int            `json:"max_in_flight,omitempty"`
	Idle        capacityStep   `json:"idle"` // before any request is held
	Steps       []capacityStep `json:"steps"`
	// Codes are the final answers of the held requests once released.
	Codes map[int]int `json:"codes"`
}

type capacityReport struct {
	Machine machineInfo      `json:"machine"`
	Command string           `json:"command"`
	NoFile  uint64           `json:"rlimit_nofile"`
	Store   string           `json:"store"`
	Servers []capacityServer `json:"servers"`
	Plot    string           `json:"plot,omitempty"`
}

// runCapacity is `idembench capacity`: how many requests in flight one
// server holds and what each costs. The upstream holds every request (a
// path ending in /slow) until the harness releases it; the harness opens
// one connection per held request, stepping up the count, and at each step
// reads the server's RSS and open descriptors from /proc, idemgate's
// goroutines from its /metrics, and times fresh probe requests. It runs the
// plain proxy, idemgate with max_in_flight above the last step, and
// idemgate with max_in_flight below it, which sheds the excess.
func runCapacity(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o := &capacityOptions{}
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(stdout)
	steps := fs.String("steps", "250,500,1000,2000,4000,6000,8000,10000", "requests held at once, in increasing order (at most 10000)")
	fs.StringVar(&o.store, "store", "memory", "idemgate store: memory, redis or postgres")
	fs.IntVar(&o.shedLimit, "shed-limit", 2000, "server.max_in_flight of the shedding run (0: no shedding run)")
	fs.IntVar(&o.probes, "probes", 50, "probe requests at each step, one after another")
	fs.DurationVar(&o.pause, "pause", time.Second, "wait after each step is held, before sampling")
	nofile := fs.Uint64("nofile", 65536, "RLIMIT_NOFILE the harness sets for itself and the servers it starts (raised to at most the hard limit unless privileged)")
	o.harnessFlags(fs, getenv, "bench/out/capacity-TIMESTAMP", ", for -store postgres", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	for _, s := range splitList(*steps) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 || (len(o.steps) > 0 && n <= o.steps[len(o.steps)-1]) {
			errs = append(errs, fmt.Errorf("-steps: %q is not an increasing count in 1..10000", s))
			continue
		}
		o.steps = append(o.steps, n)
	}
	if len(o.steps) == 0 {
		errs = append(errs, errors.New("-steps: none"))
	}
	if o.store != "memory" && o.store != "redis" && o.store != "postgres" {
		errs = append(errs, fmt.Errorf("-store %q: want memory, redis or postgres", o.store))
	}
	if o.probes < 1 || o.probes > 1000 {
		errs = append(errs, fmt.Errorf("-probes %d: want 1..1000", o.probes))
	}
	if o.shedLimit < 0 {
		errs = append(errs, fmt.Errorf("-shed-limit %d: want 0 or more", o.shedLimit))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := pinSelf(&o.benchOptions, stderr); err != nil {
		return err
	}
	last := o.steps[len(o.steps)-1]
	var err error
	if o.nofile, err = raiseNoFile(max(*nofile, uint64(4*last+4096))); err != nil {
		return err
	}
	if err := o.prepare("capacity"); err != nil {
		return err
	}
	rep := &capacityReport{Machine: readMachine(), Command: "idembench capacity " + strings.Join(args, " "), NoFile: o.nofile, Store: o.store}
	log := io.MultiWriter(stdout, mustCreate(filepath.Join(o.dir, "progress.log")))
	fmt.Fprintf(log, "idembench capacity: %s; RLIMIT_NOFILE %d; steps %v; results in %s\n", rep.Machine.String(), o.nofile, o.steps, o.dir)
	// A held request costs two descriptors in the server (its connection
	// and the one to the upstream) and two in the harness (the client's
	// and the upstream's end): steps the limit cannot carry would measure
	// the harness running out, so the last step is the most it carries.
	if carried := int(o.nofile-1024) / 2 / 100 * 100; last > carried {
		o.steps = slices.DeleteFunc(o.steps, func(n int) bool { return n >= carried })
		o.steps = append(o.steps, carried)
		fmt.Fprintf(log, "idembench capacity: RLIMIT_NOFILE %d carries at most %d held requests (two descriptors each, in the server and in the harness): the steps stop there\n", o.nofile, carried)
		last = carried
	}

	svc, closeSvc, err := storeServices(ctx, &o.benchOptions, o.store)
	if err != nil {
		return err
	}
	defer closeSvc()
	// Every server's run must end before the servers' write timeout
	// (120 s) cuts the first requests it holds; the upstream lets go
	// before that by itself.
	up := newUpstream(110 * time.Second)
	upAddr, stopUp, err := serveUpstream(up)
	if err != nil {
		return err
	}
	defer stopUp()
	upURL := "http://" + upAddr

	type run struct {
		name  string
		limit int
	}
	runs := []run{{"baseline", 0}, {"idemgate", last + 1000}}
	if o.shedLimit > 0 {
		runs = append(runs, run{"idemgate, shedding", o.shedLimit})
	}
	for _, r := range runs {
		if err := ctx.Err(); err != nil {
			return err
		}
		var (
			t   *target
			c   *candidate
			err error
		)
		if r.name == "baseline" {
			t, err = startBaseline(ctx, &o.benchOptions, upURL)
		} else {
			c, err = startCandidate(ctx, candidateOptions{bin: o.bin, store: o.store, upstream: upURL, dir: o.dir, cpu: o.serverCPU,
				logLevel: o.logLevel, svc: svc, extra: fmt.Sprintf("server: {max_in_flight: %d}\n", r.limit)})
			if err == nil {
				t = &target{name: r.name, proc: c.proc, base: "http://" + c.addr}
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Fprintf(log, "%s (max_in_flight %d):\n", r.name, r.limit)
		srv, err := capacityRun(ctx, o, up, t, c, log)
		t.proc.Stop(syscall.SIGTERM, stopGrace)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		srv.Name, srv.MaxInFlight = r.name, r.limit
		rep.Servers = append(rep.Servers, srv)
	}
	md := rep.markdown()
	if path, err := rep.plot(o.dir); err != nil {
		fmt.Fprintf(log, "idembench capacity: plot: %v\n", err)
	} else {
		rep.Plot = path
		md += fmt.Sprintf("\nPlot: `%s`\n", path)
	}
	return saveResults(stdout, o.dir, "capacity", md, rep)
}

// raiseNoFile sets the process's RLIMIT_NOFILE to want, or to as much as
// the hard limit allows when the process may not raise it; the servers
// the harness starts inherit it (Go gives children the limit it was
// started with unless the program set one itself).
func raiseNoFile(want uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Max < want {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err == nil {
			return want, nil
		}
	}
	rl.Cur = min(want, rl.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("setrlimit NOFILE %d: %w", rl.Cur, err)
	}
	return rl.Cur, nil
}

// capacityRun steps one server up through o.steps and releases everything
// at the end. c is nil for the baseline.
func capacityRun(ctx context.Context, o *capacityOptions, up *upstream, t *target, c *candidate, log io.Writer) (capacityServer, error) {
	srv := capacityServer{Codes: map[int]int{}}
	addr := strings.TrimPrefix(t.base, "http://")
	prefix := fmt.Sprintf("cap-%d", time.Now().UnixNano())
	probeClient := loadClient(1)
	defer probeClient.CloseIdleConnections()

	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		conns        []net.Conn
		shed, failed atomic.Int64
		released     atomic.Bool
	)
	heldAtStart := up.held.Load()
	closeAll := func() {
		mu.Lock()
		for _, cn := range conns {
			_ = cn.Close()
		}
		conns = nil
		mu.Unlock()
	}
	defer func() {
		up.release()
		closeAll()
		wg.Wait()
	}()
	sample := func(target int) capacityStep {
		s := capacityStep{Target: target, Held: up.held.Load() - heldAtStart, Shed: shed.Load(), Failed: failed.Load()}
		s.RSS, _ = procRSS(t.proc.Pid())
		s.FDs = openFDs(t.proc.Pid())
		if c != nil {
			if g, err := c.gauges(ctx, "go_goroutines", "idemgate_requests_in_flight"); err == nil {
				s.Goroutines, s.InFlight = g["go_goroutines"], g["idemgate_requests_in_flight"]
			}
		}
		s.ProbeP50, s.ProbeMax, s.ProbeCode = capacityProbe(ctx, probeClient, t.base, fmt.Sprintf("%s-probe-%d", prefix, target), o.probes)
		fmt.Fprintf(log, "  %5d requested: %5d held, %5d shed, %4d failed; RSS %6.1f MiB, %5d fds, goroutines %5.0f; probe p50 %s max %s (%d)\n",
			target, s.Held, s.Shed, s.Failed, float64(s.RSS)/(1<<20), s.FDs, s.Goroutines, fmtDur(s.ProbeP50), fmtDur(s.ProbeMax), s.ProbeCode)
		return s
	}
	srv.Idle = sample(0)

	codes := make(chan int, 10000)
	hold := func(n int) {
		defer wg.Done()
		cn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			failed.Add(1)
			return
		}
		mu.Lock()
		conns = append(conns, cn)
		mu.Unlock()
		body := benchBody
		req := fmt.Sprintf("POST /v1/payments/slow HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s-%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			addr, benchAPIKey, prefix, n, len(body), body)
		if _, err := io.WriteString(cn, req); err != nil {
			failed.Add(1)
			return
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(cn, 512), nil)
		if err != nil {
			failed.Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			shed.Add(1)
			_ = cn.Close() // a shed client lets go of its connection
		case !released.Load():
			failed.Add(1) // answered while it should be held: a 502, say
		}
		codes <- resp.StatusCode
	}
	started := 0
	for _, n := range o.steps {
		// Dial in bursts so that the listen backlog is not overrun.
		for started < n {
			burst := min(n-started, 128)
			for range burst {
				wg.Add(1)
				go hold(started)
				started++
			}
			time.Sleep(25 * time.Millisecond)
		}
		deadline := time.Now().Add(30 * time.Second)
		for up.held.Load()-heldAtStart+shed.Load()+failed.Load() < int64(n) && time.Now().Before(deadline) {
			if !proc.Sleep(ctx, 50*time.Millisecond) {
				return srv, ctx.Err()
			}
		}
		if !proc.Sleep(ctx, o.pause) {
			return srv, ctx.Err()
		}
		srv.Steps = append(srv.Steps, sample(n))
	}
	released.Store(true)
	up.release()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		closeAll()
		<-done
	}
	close(codes)
	for code := range codes {
		srv.Codes[code]++
	}
	if f := failed.Load(); f > 0 {
		srv.Codes[0] += int(f)
	}
	return srv, nil
}

// capacityProbe sends n fresh requests one after another and returns the
// median and the largest latency and the status most of them got.
func capacityProbe(ctx context.Context, client *http.Client, base, keyPrefix string, n int) (p50, maxLat time.Duration, code int) {
	lat := make([]time.Duration, 0, n)
	byCode := map[int]int{}
	for i := range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/payments", strings.NewReader(benchBody))
		if err != nil {
			return 0, 0, 0
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+benchAPIKey)
		req.Header.Set("Idempotency-Key", keyPrefix+"-"+strconv.Itoa(i))
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			byCode[0]++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		byCode[resp.StatusCode]++
	}
	for c, k := range byCode {
		if k > byCode[code] || (k == byCode[code] && c > code) {
			code = c
		}
	}
	if len(lat) == 0 {
		return 0, 0, code
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)-1], code
}

// openFDs counts the descriptors pid has open; -1 when unknown.
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// perHeld is what one held request added to v since the idle sample.
func (s capacityStep) perHeld(v, idle float64) float64 {
	if s.Held <= 0 {
		return 0
	}
	return (v - idle) / float64(s.Held)
}

func (rep *capacityReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## idembench capacity\n\n- machine: %s\n- command: `%s`\n- RLIMIT_NOFILE %d; idemgate store %s; each server pinned to one CPU, the harness (connections, probes, upstream) to another\n\n",
		rep.Machine.String(), strings.TrimSpace(rep.Command), rep.NoFile, rep.Store)
	b.WriteString("| server | requested | held | shed (503) | failed | RSS | KiB per held | fds | goroutines | per held | probe p50 | probe max | probe status |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, srv := range rep.Servers {
		name := srv.Name
		if srv.MaxInFlight > 0 {
			name += fmt.Sprintf(" (max_in_flight %d)", srv.MaxInFlight)
		}
		for _, s := range append([]capacityStep{srv.Idle}, srv.Steps...) {
			kib, gor, per := "-", "-", "-"
			if s.Held > 0 {
				kib = fmt.Sprintf("%.1f", s.perHeld(float64(s.RSS), float64(srv.Idle.RSS))/1024)
			}
			if s.Goroutines > 0 {
				gor = fmt.Sprintf("%.0f", s.Goroutines)
				if s.Held > 0 {
					per = fmt.Sprintf("%.2f", s.perHeld(s.Goroutines, srv.Idle.Goroutines))
				}
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.1f MiB | %s | %d | %s | %s | %s | %s | %d |\n",
				name, s.Target, s.Held, s.Shed, s.Failed, float64(s.RSS)/(1<<20), kib, s.FDs, gor, per, fmtDur(s.ProbeP50), fmtDur(s.ProbeMax), s.ProbeCode)
		}
	}
	b.WriteString("\nFinal answers of the held requests once released (0: not connected or not answered):\n\n")
	for _, srv := range rep.Servers {
		fmt.Fprintf(&b, "- %s: %v\n", srv.Name, srv.Codes)
	}
	return b.String()
}

// plot draws RSS and probe latency against the requests held, one line
// per server: capacity.png, two panels side by side.
func (rep *capacityReport) plot(dir string) (string, error) {
	colors := []color.Color{color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 255}, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}}
	panels := []*plot.Plot{plot.New(), plot.New()}
	panels[0].Title.Text, panels[0].Y.Label.Text = "resident memory", "RSS (MiB)"
	panels[1].Title.Text, panels[1].Y.Label.Text = "latency of a fresh request (median of the probes)", "ms"
	for i, pl := range panels {
		pl.X.Label.Text = "requests opened and held at the upstream"
		pl.Y.Min = 0
		pl.Legend.Top, pl.Legend.Left = true, true
		for si, srv := range rep.Servers {
			var xys plotter.XYs
			for _, s := range append([]capacityStep{srv.Idle}, srv.Steps...) {
				y := float64(s.RSS) / (1 << 20)
				if i == 1 {
					y = float64(s.ProbeP50) / 1e6
				}
				xys = append(xys, plotter.XY{X: float64(s.Target), Y: y})
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return "", err
			}
			l.Color, pts.Color, l.Width = colors[si%len(colors)], colors[si%len(colors)], vg.Points(1.5)
			pl.Add(l, pts)
			label := srv.Name
			if srv.MaxInFlight > 0 {
				label += fmt.Sprintf(" (max_in_flight %d)", srv.MaxInFlight)
			}
			pl.Legend.Add(label, l, pts)
		}
		pl.Y.Max *= 1.3 // room for the legend
	}
	path := filepath.Join(dir, "capacity.png")
	if err := savePanels(panels, path); err != nil {
		return "", err
	}
	return path, nil
}
