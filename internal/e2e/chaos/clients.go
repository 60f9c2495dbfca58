package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/proc"
	"github.com/idemgate/idemgate/lincheck"
)

// clientsPerKey is how many clients send each key at once: the original
// and two impatient retries, as a caller behind a timeout would produce.
const clientsPerKey = 3

// load is the traffic of one scenario: keys started at an even pace over
// spread, each sent by clientsPerKey concurrent clients that retry with
// the same key and body until they get a final answer or the key's
// deadline passes.
type load struct {
	gateways       []string // the gateways' base URLs
	path           string
	tenant         string
	body           func(key string) []byte
	spread         time.Duration
	attemptTimeout time.Duration // one HTTP exchange
	keyDeadline    time.Duration // from the key's start
}

// answer is a client's final answer: any status but 409, 429 and 5xx.
type answer struct {
	status int
	id     string // charge_id of a proxied answer, id of a job document
	at     time.Time
}

// keyResult is what the clients of one key got.
type keyResult struct {
	key     string
	job     bool     // sent to the enqueue route
	answers []answer // one per client that got a final answer
}

// loadResult is what the whole load got.
type loadResult struct {
	start, lastLaunch time.Time
	keys              []keyResult
	successes         []time.Time // every 2xx any client received, replays included
	attempts          []call      // every exchange of every client, in no order
	// history has every exchange of every client: its key, when it was
	// sent, when and what it was answered (the key model's Requests).
	history *lincheck.Recorder
}

// call is one exchange: when it was sent, when it ended, and its
// status (0: a connection error or a timeout).
type call struct {
	sent, at time.Time
	status   int
}

// runLoad sends keys and returns when every client has finished (a final
// answer, its deadline, or ctx's end).
func runLoad(ctx context.Context, l load, keys []string) *loadResult {
	transport := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: l.attemptTimeout}

	res := &loadResult{start: time.Now(), keys: make([]keyResult, len(keys)), history: lincheck.NewRecorder()}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	record := func(a call) {
		mu.Lock()
		if a.status >= 200 && a.status < 300 {
			res.successes = append(res.successes, a.at)
		}
		res.attempts = append(res.attempts, a)
		mu.Unlock()
	}
	var pace time.Duration
	if len(keys) > 1 {
		pace = l.spread / time.Duration(len(keys)-1)
	}
	for i, key := range keys {
		if i > 0 {
			if !proc.Sleep(ctx, time.Until(res.start.Add(time.Duration(i)*pace))) {
				break
			}
		}
		res.lastLaunch = time.Now()
		res.keys[i].key, res.keys[i].job = key, l.path == jobsPath
		kctx, cancel := context.WithTimeout(ctx, l.keyDeadline)
		var kwg sync.WaitGroup
		answers := make([]*answer, clientsPerKey)
		for c := range clientsPerKey {
			kwg.Go(func() { answers[c] = l.send(kctx, client, res.history, key, c, record) })
		}
		wg.Go(func() {
			kwg.Wait()
			cancel()
			for _, a := range answers {
				if a != nil {
					res.keys[i].answers = append(res.keys[i].answers, *a)
				}
			}
		})
	}
	wg.Wait()
	for i := range res.keys {
		if res.keys[i].key == "" {
			res.keys[i].key, res.keys[i].job = keys[i], l.path == jobsPath
		}
	}
	slices.SortFunc(res.successes, func(a, b time.Time) int { return a.Compare(b) })
	return res
}

// send is one client: it retries on connection errors, 409, 429 and 5xx
// with the same key and body, honouring Retry-After, and alternates
// between the gateways as a load balancer would. It returns nil when no
// final answer came before ctx ended. Each exchange goes into rec and
// record.
func (l load) send(ctx context.Context, client *http.Client, rec *lincheck.Recorder, key string, c int, record func(call)) *answer {
	body := l.body(key)
	for attempt := 0; ; attempt++ {
		url := l.gateways[(c+attempt)%len(l.gateways)] + l.path
		sent := time.Now()
		done := rec.Begin(c, key, lincheck.Request{})
		status, retryAfter, id := l.exchange(ctx, client, url, key, body)
		done(lincheck.Answer{Status: status, ID: id})
		now := time.Now()
		if ctx.Err() == nil {
			record(call{sent: sent, at: now, status: status})
		}
		if status != 0 && status != http.StatusConflict && status != http.StatusTooManyRequests && status < 500 {
			return &answer{status: status, id: id, at: now}
		}
		wait := retryAfter
		if wait <= 0 {
			// Exponential backoff with full jitter, 50ms to 1s.
			wait = time.Duration(rand.Int64N(int64(min(50*time.Millisecond<<min(attempt, 5), time.Second)))) + 10*time.Millisecond
		}
		if !proc.Sleep(ctx, wait) {
			return nil
		}
	}
}

// exchange is one attempt: status 0 for a connection error or timeout.
func (l load) exchange(ctx context.Context, client *http.Client, url, key string, body []byte) (status int, retryAfter time.Duration, id string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set(tenantHeader, l.tenant)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, ""
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return 0, 0, ""
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		retryAfter = time.Duration(s) * time.Second
	}
	var doc struct {
		ChargeID string `json:"charge_id"`
		ID       string `json:"id"`
	}
	if resp.StatusCode < 300 && json.Unmarshal(raw, &doc) == nil {
		id = doc.ChargeID
		if id == "" {
			id = doc.ID
		}
	}
	return resp.StatusCode, retryAfter, id
}

// runMixed sends every other key to the proxy route and the others to the
// enqueue route, the two halves side by side over the same spread, and
// returns what both got.
func runMixed(ctx context.Context, l load, keys []string) *loadResult {
	var proxied, jobs []string
	for i, k := range keys {
		if i%2 == 0 {
			proxied = append(proxied, k)
		} else {
			jobs = append(jobs, k)
		}
	}
	lj := l
	lj.path = jobsPath
	var (
		wg     sync.WaitGroup
		rp, rj *loadResult
	)
	wg.Go(func() { rp = runLoad(ctx, l, proxied) })
	wg.Go(func() { rj = runLoad(ctx, lj, jobs) })
	wg.Wait()
	res := &loadResult{
		start:      rp.start,
		lastLaunch: rp.lastLaunch,
		keys:       append(rp.keys, rj.keys...),
		successes:  append(rp.successes, rj.successes...),
		attempts:   append(rp.attempts, rj.attempts...),
		history:    lincheck.NewRecorder(),
	}
	for _, op := range append(rp.history.Operations(), rj.history.Operations()...) {
		res.history.Add(op)
	}
	if rj.start.Before(res.start) {
		res.start = rj.start
	}
	if rj.lastLaunch.After(res.lastLaunch) {
		res.lastLaunch = rj.lastLaunch
	}
	slices.SortFunc(res.successes, func(a, b time.Time) int { return a.Compare(b) })
	return res
}
