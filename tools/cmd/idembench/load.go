package main

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Every scenario sends the same request: a JSON payment, authenticated as
// the bench tenant, with an Idempotency-Key chosen by the scenario.
const (
	benchAPIKey = "bench-key"
	benchBody   = `{"amount_cents":1250,"currency":"EUR","customer":"cus_42","description":"idembench"}`
)

// maxRequestsPerRun bounds every run in count as well as in time.
const maxRequestsPerRun = 5_000_000

// loadSpec is one run of the load generator.
type loadSpec struct {
	name   string
	target string // full URL, loopback only
	// key returns the Idempotency-Key of the n-th request (from 0); nil
	// sends none.
	key func(n uint64) string
	// body returns the body of the n-th request; nil sends benchBody.
	body func(n uint64) []byte
	// concurrency is the number of workers and connections in a closed
	// loop; with rate > 0 it is the most workers the open loop may use.
	concurrency int
	rate        int // requests per second; 0: as fast as the workers go
	duration    time.Duration
}

// loadResult is what one run measured.
type loadResult struct {
	Requests int              `json:"requests"`
	Seconds  float64          `json:"seconds"`
	RPS      float64          `json:"rps"`
	P50      time.Duration    `json:"p50_ns"`
	P99      time.Duration    `json:"p99_ns"`
	Max      time.Duration    `json:"max_ns"`
	Codes    map[int]int      `json:"codes"`
	ByCode   map[int]latStats `json:"by_code"`
	Errors   map[string]int   `json:"errors,omitempty"`
	Replayed int              `json:"replayed"` // responses with Idempotent-Replayed: true
	// What the server process and the two CPUs did during the run.
	ServerCPU  time.Duration `json:"server_cpu_ns"`
	ServerBusy float64       `json:"server_core_busy"`
	LoadBusy   float64       `json:"load_core_busy"`
	// ServerOther is the share of the server's CPU that other processes
	// (other than the server) kept busy: noise when it is large.
	ServerOther float64 `json:"server_core_other"`
}

type latStats struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// CPUPerReq is the server's CPU time per request.
func (r loadResult) CPUPerReq() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.ServerCPU / time.Duration(r.Requests)
}

// loadClient keeps connections to one target warm from run to run.
func loadClient(concurrency int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        concurrency,
			MaxIdleConnsPerHost: concurrency,
			MaxConnsPerHost:     concurrency,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// attack runs spec with vegeta and collects exact percentiles.
func attack(ctx context.Context, client *http.Client, spec loadSpec) (loadResult, error) {
	u, err := url.Parse(spec.target)
	if err != nil {
		return loadResult{}, err
	}
	if err := requireLoopback(u.Hostname()); err != nil {
		return loadResult{}, err
	}
	var seq atomic.Uint64
	errLimit := errors.New("request limit reached")
	targeter := func(t *vegeta.Target) error {
		n := seq.Add(1) - 1
		if n >= maxRequestsPerRun {
			return errLimit
		}
		t.Method = http.MethodPost
		t.URL = spec.target
		if spec.body != nil {
			t.Body = spec.body(n)
		} else {
			t.Body = []byte(benchBody)
		}
		t.Header = http.Header{
			"Content-Type":  {"application/json"},
			"Authorization": {"Bearer " + benchAPIKey},
		}
		if spec.key != nil {
			t.Header["Idempotency-Key"] = []string{spec.key(n)}
		}
		return nil
	}
	c := uint64(spec.concurrency)
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(c), vegeta.MaxWorkers(c), vegeta.Redirects(vegeta.NoFollow))
	rate := vegeta.Rate{Freq: spec.rate, Per: time.Second}

	var (
		lat    []time.Duration
		byCode = map[int][]time.Duration{}
		res    = loadResult{Codes: map[int]int{}, ByCode: map[int]latStats{}, Errors: map[string]int{}}
		first  time.Time
		last   time.Time
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	for r := range atk.Attack(vegeta.Targeter(targeter), rate, spec.duration, spec.name) {
		if r.Error == errLimit.Error() {
			continue
		}
		end := r.Timestamp.Add(r.Latency)
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if end.After(last) {
			last = end
		}
		code := int(r.Code)
		res.Codes[code]++
		if code == 0 {
			if len(res.Errors) < 20 {
				res.Errors[r.Error]++
			}
			continue
		}
		lat = append(lat, r.Latency)
		byCode[code] = append(byCode[code], r.Latency)
		if r.Headers.Get("Idempotent-Replayed") == "true" {
			res.Replayed++
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Requests = len(lat)
	if !first.IsZero() {
		res.Seconds = last.Sub(first).Seconds()
	}
	if res.Seconds > 0 {
		res.RPS = float64(res.Requests) / res.Seconds
	}
	res.P50, res.P99, res.Max = percentiles(lat)
	for code, l := range byCode {
		p50, p99, _ := percentiles(l)
		res.ByCode[code] = latStats{N: len(l), P50: p50, P99: p99}
	}
	return res, nil
}

// percentiles returns the exact p50, p99 and maximum of l (sorted in place).
func percentiles(l []time.Duration) (p50, p99, maxLat time.Duration) {
	if len(l) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(l))+0.5) - 1
		return l[min(max(i, 0), len(l)-1)]
	}
	return at(0.50), at(0.99), l[len(l)-1]
}

// uniqueKeys gives every request a key of its own, unique across runs.
func uniqueKeys(prefix string) func(uint64) string {
	return func(n uint64) string { return prefix + "-" + strconv.FormatUint(n, 36) }
}

// oneKey gives every request the same key.
func oneKey(key string) func(uint64) string {
	return func(uint64) string { return key }
}
