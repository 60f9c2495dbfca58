package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// machineInfo is what the figures were measured on.
type machineInfo struct {
	CPUs     int    `json:"cpus"`
	Model    string `json:"cpu_model"`
	MemBytes int64  `json:"mem_bytes"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
}

func (m machineInfo) String() string {
	return fmt.Sprintf("%d CPUs (%s), %.1f GiB memory, Linux %s, %s", m.CPUs, m.Model, float64(m.MemBytes)/(1<<30), m.Kernel, m.Go)
}

// runInfo opens the report of a run or a scale run: where, what and
// when.
type runInfo struct {
	Machine machineInfo    `json:"machine"`
	Command string         `json:"command"`
	Options map[string]any `json:"options"`
	Started time.Time      `json:"started"`
	Seconds float64        `json:"seconds"` // set when the run ends
}

// newRunInfo starts the report of `idembench cmd args...` now.
func newRunInfo(cmd string, args []string, options map[string]any) runInfo {
	return runInfo{Started: time.Now(), Machine: readMachine(), Command: "idembench " + cmd + " " + strings.Join(args, " "), Options: options}
}

func readMachine() machineInfo {
	m := machineInfo{CPUs: onlineCPUs(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.Model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemBytes = kb * 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// onlineCPUs counts the machine's CPUs, not the harness' affinity mask
// (which pinning narrows to one).
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, _ := strconv.Atoi(lo)
		z := a
		if found {
			z, _ = strconv.Atoi(hi)
		}
		n += z - a + 1
	}
	return n
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func pick(pairs []pairRecord, f func(pairRecord) float64) []float64 {
	out := make([]float64, len(pairs))
	for i, p := range pairs {
		out[i] = f(p)
	}
	return out
}

func medDur(pairs []pairRecord, f func(pairRecord) time.Duration) time.Duration {
	return time.Duration(median(pick(pairs, func(p pairRecord) float64 { return float64(f(p)) })))
}

// ratioCell is "median [min–max]" of the pairs' ratios.
func ratioCell(pairs []pairRecord) string {
	r := pick(pairs, pairRecord.Ratio)
	if len(r) == 0 {
		return "-"
	}
	if len(r) == 1 {
		return fmt.Sprintf("**%.2f×**", r[0])
	}
	return fmt.Sprintf("**%.2f×** [%.2f–%.2f]", median(r), slices.Min(r), slices.Max(r))
}

func pct(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

// markdown renders the report as the tables BENCHMARKS.md shows.
func (rep *benchReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## idembench — %s\n\n", rep.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- machine: %s\n", rep.Machine.String())
	fmt.Fprintf(&b, "- command: `%s`\n", strings.TrimSpace(rep.Command))
	keys := make([]string, 0, len(rep.Options))
	for k := range rep.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var opts []string
	for _, k := range keys {
		opts = append(opts, fmt.Sprintf("%s=%v", k, rep.Options[k]))
	}
	fmt.Fprintf(&b, "- options: %s\n", strings.Join(opts, ", "))
	fmt.Fprintf(&b, "- took %.0fs\n\n", rep.Seconds)

	if len(rep.Scenarios) > 0 {
		b.WriteString("### HTTP scenarios\n\n")
		b.WriteString("Each round runs the baseline, then idemgate, with the same load; the ratio is idemgate's req/s over the baseline's in the same round (median [min–max] over the rounds). Latencies and CPU are medians over the rounds.\n\n")
		b.WriteString("| scenario | store | baseline req/s | idemgate req/s | ratio | baseline p50 / p99 | idemgate p50 / p99 | 409 p99 | server CPU µs/req (baseline / idemgate) | server core busy (baseline / idemgate) |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, sc := range rep.Scenarios {
			if len(sc.Pairs) == 0 {
				continue
			}
			ps := sc.Pairs
			conflict := "-"
			if sc.Scenario == "inflight" {
				conflict = fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Cand.ByCode[http.StatusConflict].P99 }))
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %s | %s / %s | %s / %s | %s | %.0f / %.0f | %s / %s |\n",
				sc.Scenario, sc.Store,
				median(pick(ps, func(p pairRecord) float64 { return p.Base.RPS })),
				median(pick(ps, func(p pairRecord) float64 { return p.Cand.RPS })),
				ratioCell(ps),
				fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Base.P50 })),
				fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Base.P99 })),
				fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Cand.P50 })),
				fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Cand.P99 })),
				conflict,
				median(pick(ps, func(p pairRecord) float64 { return float64(p.Base.CPUPerReq().Microseconds()) })),
				median(pick(ps, func(p pairRecord) float64 { return float64(p.Cand.CPUPerReq().Microseconds()) })),
				pct(median(pick(ps, func(p pairRecord) float64 { return p.Base.ServerBusy }))),
				pct(median(pick(ps, func(p pairRecord) float64 { return p.Cand.ServerBusy }))),
			)
		}
		b.WriteString("\n")
		rep.fixedRate(&b)
		rep.storeCosts(&b)
	}
	if len(rep.Workers) > 0 {
		b.WriteString("### Workers\n\n")
		b.WriteString("Each round runs raw asynq with a no-op handler, then the same no-op behind workers.Handle, on the same Redis and PostgreSQL; the jobs are enqueued before the clock starts. PostgreSQL counters are cluster-wide per job; Redis calls per job include asynq's own.\n\n")
		b.WriteString("| round | raw asynq jobs/s | workers.Handle jobs/s | ratio | worker CPU µs/job (raw / wrapped) | PG commits/job (wrapped) | WAL syncs/job (wrapped) | Redis calls/job (raw / wrapped) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		perJob := func(r workerResult) (commits, syncs, calls float64) {
			if r.DB != nil {
				commits, syncs = float64(r.DB.Commits)/float64(r.Jobs), float64(r.DB.WALSyncs)/float64(r.Jobs)
			}
			var n int64
			for _, v := range r.RedisCalls {
				n += v
			}
			return commits, syncs, float64(n) / float64(r.Jobs)
		}
		for i, w := range rep.Workers {
			_, _, rawCalls := perJob(w.Raw)
			commits, syncs, calls := perJob(w.Wrapped)
			fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f× | %.0f / %.0f | %.2f | %.2f | %.1f / %.1f |\n", i+1, w.Raw.JobsPerSec, w.Wrapped.JobsPerSec,
				w.Wrapped.JobsPerSec/w.Raw.JobsPerSec, w.Raw.CPUSeconds*1e6/float64(w.Raw.Jobs), w.Wrapped.CPUSeconds*1e6/float64(w.Wrapped.Jobs),
				commits, syncs, rawCalls, calls)
		}
		b.WriteString("\n")
	}
	if len(rep.River) > 0 {
		b.WriteString("### Workers next to River\n\n")
		b.WriteString(riverTable(rep.River))
		if rep.RiverPlot != "" {
			fmt.Fprintf(&b, "Plot: `%s`\n\n", rep.RiverPlot)
		}
	}
	rep.targets(&b)
	if len(rep.Problems) > 0 {
		b.WriteString("### Problems\n\n")
		for _, p := range rep.Problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fixedRate shows the in-flight scenario's open-loop runs.
func (rep *benchReport) fixedRate(b *strings.Builder) {
	var rows []string
	for _, sc := range rep.Scenarios {
		var ps []pairRecord
		for _, p := range sc.Pairs {
			if p.Fixed != nil {
				ps = append(ps, pairRecord{Cand: *p.Fixed})
			}
		}
		if len(ps) == 0 {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | %.0f | %s | %s | %.0f |", sc.Store,
			median(pick(ps, func(p pairRecord) float64 { return p.Cand.RPS })),
			fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Cand.ByCode[http.StatusConflict].P50 })),
			fmtDur(medDur(ps, func(p pairRecord) time.Duration { return p.Cand.ByCode[http.StatusConflict].P99 })),
			median(pick(ps, func(p pairRecord) float64 { return float64(p.Cand.CPUPerReq().Microseconds()) }))))
	}
	writeTable(b, "The in-flight scenario again at a fixed rate (open loop), where latency is the 409 path's own rather than queueing behind a saturated CPU:\n\n"+
		"| store | req/s | 409 p50 | 409 p99 | server CPU µs/req |\n|---|---:|---:|---:|---:|\n", rows)
}

// writeTable writes head (a sentence and a table header) and rows, one a
// line; nothing when there are no rows.
func writeTable(b *strings.Builder, head string, rows []string) {
	if len(rows) == 0 {
		return
	}
	b.WriteString(head)
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	b.WriteString("\n")
}

// storeCosts shows what each idemgate request cost the store's service.
func (rep *benchReport) storeCosts(b *strings.Builder) {
	var rows []string
	for _, sc := range rep.Scenarios {
		var cells []string
		switch sc.Store {
		case "postgres":
			var commits, recs, bytes, syncs []float64
			for _, p := range sc.Pairs {
				if p.DB == nil || p.Cand.Requests == 0 {
					continue
				}
				n := float64(p.Cand.Requests)
				commits = append(commits, float64(p.DB.Commits)/n)
				recs = append(recs, float64(p.DB.WALRecords)/n)
				bytes = append(bytes, float64(p.DB.WALBytes)/n)
				syncs = append(syncs, float64(p.DB.WALSyncs)/n)
			}
			cells = append(cells, fmt.Sprintf("commits %.2f, WAL records %.1f, WAL bytes %.0f, WAL syncs %.2f", median(commits), median(recs), median(bytes), median(syncs)))
			if w := topWaits(sc.Waits, 4); w != "" {
				cells = append(cells, w)
			}
		case "redis":
			calls := map[string][]float64{}
			for _, p := range sc.Pairs {
				for k, v := range p.RedisCalls {
					if p.Cand.Requests > 0 {
						calls[k] = append(calls[k], float64(v)/float64(p.Cand.Requests))
					}
				}
			}
			var parts []string
			for _, k := range slices.Sorted(mapKeys(calls)) {
				if m := median(calls[k]); m >= 0.01 {
					parts = append(parts, fmt.Sprintf("%s %.2f", k, m))
				}
			}
			cells = append(cells, strings.Join(parts, ", "))
		default:
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |", sc.Scenario, sc.Store, strings.Join(cells, "; ")))
	}
	writeTable(b, "Store work per idemgate request (server-wide counters, so other clients of the same Redis or PostgreSQL add noise); PostgreSQL waits are samples of its active backends every 20 ms during the idemgate runs:\n\n"+
		"| scenario | store | per request |\n|---|---|---|\n", rows)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func topWaits(w map[string]int, n int) string {
	total := 0
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range w {
		l = append(l, kv{k, v})
		total += v
	}
	if total == 0 {
		return ""
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
	var parts []string
	for _, e := range l[:min(n, len(l))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", e.k, 100*float64(e.v)/float64(total)))
	}
	return "PG backends: " + strings.Join(parts, ", ")
}

// targets compares the medians with the targets of the performance issue.
func (rep *benchReport) targets(b *strings.Builder) {
	find := func(scenario, store string) []pairRecord {
		for _, sc := range rep.Scenarios {
			if sc.Scenario == scenario && sc.Store == store {
				return sc.Pairs
			}
		}
		return nil
	}
	type row struct{ target, measured, met string }
	var rows []row
	ratioRow := func(label, scenario, store string, want float64) {
		ps := find(scenario, store)
		if len(ps) == 0 {
			return
		}
		m := median(pick(ps, pairRecord.Ratio))
		rows = append(rows, row{fmt.Sprintf("%s ≥ %.2f×", label, want), fmt.Sprintf("%.2f×", m), yesNo(m >= want)})
	}
	// The second round's targets (BENCHMARKS.md, "Round two").
	ratioRow("unique keys, memory store", "unique", "memory", 0.95)
	ratioRow("unique keys, Redis store", "unique", "redis", 0.85)
	ratioRow("unique keys, PostgreSQL store", "unique", "postgres", 0.70)
	for _, st := range []string{"memory", "redis", "postgres"} {
		ratioRow("replay, "+st+" store", "replay", st, 5.5)
	}
	for _, st := range []string{"memory", "redis", "postgres"} {
		ps := find("inflight", st)
		if len(ps) == 0 {
			continue
		}
		p99 := medDur(ps, func(p pairRecord) time.Duration { return p.Cand.ByCode[http.StatusConflict].P99 })
		rows = append(rows, row{"409 path p99 < 5 ms, " + st + " store, same closed-loop load", fmtDur(p99), yesNo(p99 > 0 && p99 < 5*time.Millisecond)})
		if ps[0].Fixed != nil {
			fixed := medDur(ps, func(p pairRecord) time.Duration {
				if p.Fixed == nil {
					return 0
				}
				return p.Fixed.ByCode[http.StatusConflict].P99
			})
			rate := median(pick(ps, func(p pairRecord) float64 {
				if p.Fixed == nil {
					return 0
				}
				return p.Fixed.RPS
			}))
			rows = append(rows, row{fmt.Sprintf("409 path p99 < 5 ms, %s store, fixed %.0f req/s", st, rate), fmtDur(fixed), yesNo(fixed > 0 && fixed < 5*time.Millisecond)})
		}
	}
	if len(rep.Workers) > 0 {
		var r []float64
		for _, w := range rep.Workers {
			r = append(r, w.Wrapped.JobsPerSec/w.Raw.JobsPerSec)
		}
		m := median(r)
		rows = append(rows, row{"worker wrapper ≥ 0.5× raw asynq", fmt.Sprintf("%.2f×", m), yesNo(m >= 0.5)})
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Targets\n\n| target | measured (median) | met |\n|---|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s |\n", r.target, r.measured, r.met)
	}
	b.WriteString("| soak: RSS and goroutines flat | see `make soak` | |\n\n")
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// writeReport prints the tables and saves them with the raw data.
func writeReport(rep *benchReport, dir string, stdout io.Writer) error {
	if path, err := riverPlot(rep.River, dir); err != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("river: plot: %v", err))
	} else {
		rep.RiverPlot = path
	}
	if err := saveResults(stdout, dir, "results", rep.markdown(), rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "idembench: wrote %s and %s\n", filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json"))
	return nil
}

// saveResults prints a command's tables, md, and saves them as NAME.md in
// dir, with the raw data, rep, as NAME.json.
func saveResults(stdout io.Writer, dir, name, md string, rep any) error {
	fmt.Fprint(stdout, "\n"+md)
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".json"), js, 0o644)
}
