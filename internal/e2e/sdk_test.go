package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	sdk "github.com/idemgate/idemgate/client"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/openapi"
)

// sdkUpstream is the service behind the gateway in the SDK tests. Per key,
// the first request finds it busy (503, so the gateway releases the key),
// the second runs — for 3s on /v1/sdk/slow — and a third would be a second
// execution.
type sdkUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string][]upstreamCall // client key → calls
}

type upstreamCall struct {
	body   string
	status int // 0 while running
}

func newSDKUpstream(t *testing.T) *sdkUpstream {
	u := &sdkUpstream{calls: map[string][]upstreamCall{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *sdkUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	// The gateway may scope the key it forwards by tenant.
	key := strings.TrimPrefix(r.Header.Get("Idempotency-Key"), "acme:")
	u.mu.Lock()
	u.calls[key] = append(u.calls[key], upstreamCall{body: string(body)})
	n := len(u.calls[key])
	u.mu.Unlock()
	status := http.StatusCreated
	switch {
	case n == 1:
		status = http.StatusServiceUnavailable
	case n == 2 && r.URL.Path == "/v1/sdk/slow":
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	u.mu.Lock()
	u.calls[key][n-1].status = status
	u.mu.Unlock()
	if status != http.StatusCreated {
		http.Error(w, "busy", status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"execution": n, "at": time.Now().UnixNano()})
}

func (u *sdkUpstream) callsOf(key string) []upstreamCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamCall(nil), u.calls[key]...)
}

// attemptLog is an SDK client's transport that records every attempt.
type attemptLog struct {
	tr *http.Transport
	// answered, when set, runs after each answer, before the SDK sees it.
	answered func(status int)

	mu       sync.Mutex
	attempts []sentAttempt
}

type sentAttempt struct {
	path, key  string
	body       []byte
	status     int // 0: no answer
	sent, done time.Time
}

func newAttemptLog(t *testing.T) *attemptLog {
	l := &attemptLog{tr: &http.Transport{}}
	t.Cleanup(l.tr.CloseIdleConnections)
	return l
}

func (l *attemptLog) RoundTrip(r *http.Request) (*http.Response, error) {
	a := sentAttempt{path: r.URL.Path, key: r.Header.Get("Idempotency-Key"), sent: time.Now()}
	r = r.Clone(r.Context())
	if r.Body != nil {
		a.body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(a.body))
	}
	res, err := l.tr.RoundTrip(r)
	a.done = time.Now()
	if err == nil {
		a.status = res.StatusCode
	}
	l.mu.Lock()
	l.attempts = append(l.attempts, a)
	l.mu.Unlock()
	if l.answered != nil {
		l.answered(a.status)
	}
	return res, err
}

func (l *attemptLog) all() []sentAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sentAttempt(nil), l.attempts...)
}

func (l *attemptLog) client(base string, r sdk.Retry) *sdk.Client {
	return sdk.New(base, sdk.WithAPIKey("acme-key"), sdk.WithHTTPClient(&http.Client{Transport: l}), sdk.WithRetry(r))
}

// TestSDKRetries drives the Go SDK against a real gateway (PostgreSQL)
// whose upstream first answers 503 and then runs slowly, while a
// concurrent call with the same key meets 409 in-use.
func TestSDKRetries(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	up := newSDKUpstream(t)
	// A short lease keeps Retry-After on in-use answers near a second.
	extra := fmt.Sprintf("  - {name: sdk, methods: [POST], path_prefix: /v1/sdk, upstream: %q, idempotency: {lease: 2s}}\n", up.srv.URL)
	g := startGateway(t, writeConfig(t, "postgres", dbURL, redisURL, up.srv.URL, extra))
	run := randomID() // keys are unique per run: the store outlives tests
	retry := sdk.Retry{MaxAttempts: 40, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, MaxElapsed: 90 * time.Second}
	flowKey := "sdk-" + run + "-flow"
	flowBody := map[string]any{"order_id": "o-" + run, "amount_cents": 1250, "currency": "EUR"}
	wantBody, _ := json.Marshal(flowBody)

	t.Run("503, then in use, then the stored answer", func(t *testing.T) {
		logA, logB := newAttemptLog(t), newAttemptLog(t)
		type result struct {
			resp *sdk.Response
			err  error
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		first := make(chan result, 1)
		wg.Go(func() {
			resp, err := logA.client(g.public, retry).Do(ctx, "POST", "/v1/sdk/slow", flowBody, sdk.WithKey(flowKey))
			first <- result{resp, err}
		})
		testkit.Eventually(t, "the retry after the 503 reached the upstream", 60*time.Second, func() bool { return len(up.callsOf(flowKey)) == 2 })
		b, errB := logB.client(g.public, retry).Do(ctx, "POST", "/v1/sdk/slow", flowBody, sdk.WithKey(flowKey))
		a := <-first

		if a.err != nil || a.resp.Status != 201 || a.resp.Replayed || a.resp.Attempts != 2 {
			t.Fatalf("first call: %v, %+v; want a fresh 201 on attempt 2", a.err, a.resp)
		}
		if errB != nil || b.Status != 201 || !b.Replayed || b.Attempts < 2 || !bytes.Equal(b.Body, a.resp.Body) {
			t.Fatalf("concurrent call: %v, %+v; want the stored 201 replayed after in-use answers", errB, b)
		}
		calls := up.callsOf(flowKey)
		if len(calls) != 2 || calls[0].status != 503 || calls[1].status != 201 {
			t.Fatalf("upstream calls %+v; want one 503 and exactly one execution that succeeded", calls)
		}
		for i, c := range calls {
			if c.body != string(wantBody) {
				t.Errorf("upstream call %d body %s, want %s", i+1, c.body, wantBody)
			}
		}
		sawInUse := false
		for name, log := range map[string]*attemptLog{"first": logA, "concurrent": logB} {
			as := log.all()
			for i, at := range as {
				if at.key != flowKey || !bytes.Equal(at.body, wantBody) {
					t.Errorf("%s call, attempt %d: key %q body %s; want %q and %s", name, i+1, at.key, at.body, flowKey, wantBody)
				}
				if at.status == http.StatusConflict && i+1 < len(as) {
					sawInUse = true
					// Retry-After is at least one second.
					if gap := as[i+1].sent.Sub(at.done); gap < time.Second {
						t.Errorf("%s call retried %s after a 409 in-use, want at least Retry-After (1s)", name, gap)
					}
				}
			}
		}
		if as := logA.all(); as[0].status != 503 {
			t.Errorf("first call's first answer %d, want the upstream's 503", as[0].status)
		}
		if !sawInUse {
			t.Error("the concurrent call never met 409 in-use")
		}
	})

	t.Run("a generated key", func(t *testing.T) {
		log := newAttemptLog(t)
		resp, err := log.client(g.public, retry).Do(t.Context(), "POST", "/v1/sdk/flaky", flowBody)
		if err != nil || resp.Status != 201 || resp.Attempts != 2 || resp.Replayed {
			t.Fatalf("Do: %v, %+v; want a fresh 201 on attempt 2", err, resp)
		}
		if id, err := uuid.Parse(resp.Key); err != nil || id.Version() != 7 {
			t.Fatalf("key %q is not a UUIDv7", resp.Key)
		}
		calls := up.callsOf(resp.Key)
		if len(calls) != 2 || calls[1].status != 201 || calls[0].body != calls[1].body {
			t.Errorf("upstream calls %+v for the generated key; want the 503 and one execution of the same body", calls)
		}
		for _, at := range log.all() {
			if at.key != resp.Key {
				t.Errorf("an attempt carried %q, want %q", at.key, resp.Key)
			}
		}
	})

	t.Run("same key, another body", func(t *testing.T) {
		log := newAttemptLog(t)
		other := map[string]any{"order_id": "o-" + run, "amount_cents": 9999, "currency": "EUR"}
		resp, err := log.client(g.public, retry).Do(t.Context(), "POST", "/v1/sdk/slow", other, sdk.WithKey(flowKey))
		var p *sdk.ProblemError
		if !sdk.IsKeyReused(err) || !errors.As(err, &p) || resp.Attempts != 1 || resp.Status != 422 {
			t.Fatalf("Do: %v, %+v; want 422 idempotency-key-reused at once", err, resp)
		}
		if p.RequestID == "" || p.RequestID != resp.Header.Get("X-Request-Id") {
			t.Errorf("problem request_id %q, X-Request-Id %q", p.RequestID, resp.Header.Get("X-Request-Id"))
		}
		if p.Retryable || p.IdempotencyKey != flowKey || p.Instance != "urn:uuid:"+p.RequestID || p.Documentation == "" {
			t.Errorf("problem %+v: want not retryable, naming the key, its occurrence and the draft", p)
		}
		if n := len(up.callsOf(flowKey)); n != 2 {
			t.Errorf("the refused body reached the upstream: %d calls", n)
		}
	})

	t.Run("a cancelled context stops retrying", func(t *testing.T) {
		log := newAttemptLog(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		log.answered = func(int) { cancel() }
		// Left alone, this would retry the unreachable upstream for ten minutes.
		r := sdk.Retry{MaxAttempts: 1000, MinBackoff: time.Second, MaxBackoff: time.Second, MaxElapsed: 10 * time.Minute}
		resp, err := log.client(g.public, r).Do(ctx, "POST", "/v1/dead", flowBody, sdk.WithKey("sdk-"+run+"-dead"))
		if !errors.Is(err, context.Canceled) || resp.Attempts != 1 || len(log.all()) != 1 {
			t.Fatalf("Do: %v after %d attempts (%d sent); want context.Canceled after the first", err, resp.Attempts, len(log.all()))
		}
	})

	t.Run("MaxElapsed", func(t *testing.T) {
		log := newAttemptLog(t)
		r := sdk.Retry{MaxAttempts: 1000, MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond, MaxElapsed: 2 * time.Second}
		start := time.Now()
		resp, err := log.client(g.public, r).Do(t.Context(), "POST", "/v1/dead", flowBody, sdk.WithKey("sdk-"+run+"-elapsed"))
		var p *sdk.ProblemError
		if !errors.Is(err, sdk.ErrRetriesExhausted) || !errors.As(err, &p) || p.Slug() != "upstream-unavailable" || resp.Status != 502 {
			t.Fatalf("Do: %v, %+v; want retries exhausted on 502 upstream-unavailable", err, resp)
		}
		as := log.all()
		if len(as) != resp.Attempts || resp.Attempts >= r.MaxAttempts {
			t.Fatalf("%d attempts sent, Response says %d; want MaxElapsed, not MaxAttempts, to end it", len(as), resp.Attempts)
		}
		// No attempt starts past MaxElapsed; the slack covers a timer
		// that fires late on a loaded machine.
		if late := as[len(as)-1].sent.Sub(start); late > r.MaxElapsed+2*time.Second {
			t.Errorf("the last attempt started %s after the call, want within MaxElapsed (%s)", late, r.MaxElapsed)
		}
	})
}

// TestSDKJobs submits a declared job through the SDK to a real gateway and
// worker, delivered over HTTP to a receiver run here, and waits for it.
func TestSDKJobs(t *testing.T) {
	dbURL, redisURL := testkit.Postgres(t, exampleTables()), testkit.RedisURL(t)
	var mu sync.Mutex
	deliveries := map[string]int{} // order_id → deliveries
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Data struct {
				OrderID string `json:"order_id"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&env)
		mu.Lock()
		deliveries[env.Data.OrderID]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"result_ref": "r-1"}`)
	}))
	t.Cleanup(rcv.Close)
	cfg := deliverConfig(t, dbURL, redisURL, rcv.URL+"/hooks/shipments", "sdk"+randomID())
	g := startGateway(t, cfg)
	startWorker(t, cfg)
	log := newAttemptLog(t)
	c := log.client(g.public, sdk.Retry{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	run := randomID()

	t.Run("submit and wait", func(t *testing.T) {
		order := "sdk-" + run
		job, err := c.SubmitJob(ctx, "/v1/shipments", map[string]any{"order_id": order, "quantity": 2})
		if err != nil || !strings.HasPrefix(job.Id, "job_") || job.Task != "shipment.book" {
			t.Fatalf("SubmitJob: %+v, %v", job, err)
		}
		final, err := c.WaitJob(ctx, job.Id)
		if err != nil || final.Id != job.Id || final.Status != openapi.JobStatusSucceeded || final.ResultRef == nil || *final.ResultRef != "r-1" {
			t.Fatalf("WaitJob: %+v, %v; want succeeded with result_ref r-1", final, err)
		}
	})

	t.Run("the same key twice is one job", func(t *testing.T) {
		order := "sdk-twice-" + run
		payload := map[string]any{"order_id": order, "quantity": 1}
		key := sdk.WithKey("shipment-" + order)
		a, errA := c.SubmitJob(ctx, "/v1/shipments", payload, key)
		b, errB := c.SubmitJob(ctx, "/v1/shipments", payload, key)
		if errA != nil || errB != nil || a.Id == "" || a.Id != b.Id {
			t.Fatalf("two submissions with one key: %q (%v) and %q (%v); want one job", a.Id, errA, b.Id, errB)
		}
		again, err := c.Do(ctx, "POST", "/v1/shipments", payload, key)
		if err != nil || again.Status != http.StatusAccepted || !again.Replayed {
			t.Fatalf("a third submission: %v, %+v; want the stored 202 replayed", err, again)
		}
		final, err := c.WaitJob(ctx, a.Id)
		if err != nil || final.Status != openapi.JobStatusSucceeded {
			t.Fatalf("WaitJob: %+v, %v", final, err)
		}
		mu.Lock()
		n := deliveries[order]
		mu.Unlock()
		if n != 1 {
			t.Errorf("the receiver got %d deliveries, want 1", n)
		}
	})

	t.Run("an invalid payload", func(t *testing.T) {
		before := len(log.all())
		_, err := c.SubmitJob(ctx, "/v1/shipments", map[string]any{"order_id": "sdk-bad-" + run, "quantity": 0})
		var p *sdk.ProblemError
		if !sdk.IsInvalidPayload(err) || !errors.As(err, &p) || p.Status != 422 {
			t.Fatalf("SubmitJob: %v, want 422 invalid-payload", err)
		}
		if len(p.Errors) == 0 || p.Errors[0].Field != "quantity" {
			t.Errorf("problem errors %+v, want the quantity named", p.Errors)
		}
		if n := len(log.all()) - before; n != 1 {
			t.Errorf("%d attempts, want the 422 returned at once", n)
		}
	})
	t.Run("list", func(t *testing.T) {
		since := time.Now().Add(-time.Millisecond)
		var want []string // newest first
		for i := range 3 {
			job, err := c.SubmitJob(ctx, "/v1/shipments", map[string]any{"order_id": fmt.Sprintf("sdk-list-%s-%d", run, i), "quantity": 1})
			if err != nil {
				t.Fatalf("SubmitJob: %v", err)
			}
			want = append([]string{job.Id}, want...)
		}
		var got []string
		for j, err := range c.AllJobs(ctx, sdk.JobFilter{Task: "shipment.book", CreatedAfter: since, Limit: 1}) {
			if err != nil {
				t.Fatalf("AllJobs: %v", err)
			}
			got = append(got, j.Id)
		}
		if !slices.Equal(got, want) {
			t.Errorf("AllJobs, a page of 1: %v, want %v", got, want)
		}
	})
}
