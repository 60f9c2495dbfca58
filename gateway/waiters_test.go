package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/openapi"
)

// jobsEnv is a gateway whose jobs are real: recorded in PostgreSQL,
// queued in Redis, and waited on through a job.Watcher that polls the
// jobs table.
type jobsEnv struct {
	g       *Gateway
	srv     *httptest.Server
	records *job.Store
	watcher signalledWatcher
}

// startJobs serves a gateway built from opts (testOptions' tenant acme and
// route /v1/invoices, changed by edit) on real jobs.
func startJobs(t *testing.T, edit func(*Options)) *jobsEnv {
	t.Helper()
	pool := testkit.Pool(t)
	queue, _, qname := testkit.Queue(t, "waits")
	sub := job.NewSubmitter(pool, queue)

	w := job.NewWatcher(pool, job.WatcherOptions{Poll: 200 * time.Millisecond, Logger: testkit.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	e := &jobsEnv{records: sub.Records(), watcher: signalledWatcher{Watcher: w, watching: make(chan string, 100)}}
	opts := testOptions(sub)
	opts.Routes[0].Enqueue.Queue = qname
	opts.JobWatcher = e.watcher
	edit(&opts)
	e.g = newTestGateway(t, opts)
	e.srv = httptest.NewServer(e.g.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

// reply is one answer of the gateway.
type reply struct {
	status int
	header http.Header
	body   string
	err    error
}

// do sends method path with header pairs, within 20s.
func (e *jobsEnv) do(method, path, body string, header ...string) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// enqueue creates a job of the tenant whose credentials are cred (header
// pairs) and returns its id.
func (e *jobsEnv) enqueue(t *testing.T, order string, cred ...string) string {
	t.Helper()
	r := e.do(http.MethodPost, "/v1/invoices", `{"order_id":"`+order+`","amount_cents":100,"currency":"EUR"}`,
		append([]string{"Idempotency-Key", testkit.Prefix() + order, "Content-Type", "application/json"}, cred...)...)
	var doc openapi.Job
	if r.err != nil || r.status != http.StatusAccepted || json.Unmarshal([]byte(r.body), &doc) != nil {
		t.Fatalf("POST /v1/invoices: %d %s %v, want 202 with a job", r.status, r.body, r.err)
	}
	return doc.Id
}

// slug is the problem type's last segment of a problem answer, "" for
// anything else.
func (r reply) slug() string {
	var p openapi.Problem
	if r.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(r.body), &p) != nil {
		return ""
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

// Finding 2: a tenant's waits neither hold the slots of max_in_flight
// that other tenants' work needs nor grow past max_waiters_per_tenant,
// and its GETs and cancels spend its rate limit.
//
// Tenant acme, limited to 6 requests an hour, holds 3 waits
// (max_waiters_per_tenant) on a gateway whose max_in_flight is 3: tenant
// globex still reads, creates and cancels its jobs, and waits until the
// gateway holds 4 (max_waiters). acme's 4th wait is
// answered at once with the job as it stands and Idemgate-Wait-Refused;
// past its budget its GET and its cancel get 429, and the job stays
// queued.
func TestWaitsHaveTheirOwnBudget(t *testing.T) {
	t.Parallel()
	const globexKey = "globex-key"
	e := startJobs(t, func(o *Options) {
		o.Auth.Tenants = append(o.Auth.Tenants, auth.TenantKeys{Name: "globex", APIKeySHA256s: []string{hexSum(globexKey)}})
		o.RateLimits = ratelimit.Limits{"acme": {Tokens: 6, Interval: time.Hour}}
		o.MaxInFlight = 3
		o.MaxWaitersPerTenant = 3
		o.MaxWaiters = 4
		o.MaxWait = time.Minute
	})
	acme := []string{"Authorization", "Bearer " + testAPIKey}
	globex := []string{"Authorization", "Bearer " + globexKey}
	m := e.g.opts.Metrics

	held := e.enqueue(t, "held", acme...) // acme's request 1
	answers := make(chan reply, 3)
	for range 3 { // acme's requests 2 to 4
		go func() { answers <- e.do(http.MethodGet, "/v1/jobs/"+held+"?wait=60", "", acme...) }()
	}
	// The waits are held once each has given its slot of max_in_flight
	// back; one answered before that was shed or not held.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.waiters) != 3 || testutil.ToFloat64(m.inFlight) != 0 {
		select {
		case r := <-answers:
			t.Fatalf("a wait of acme answered before the job changed: %d %s %v", r.status, r.body, r.err)
		default:
		}
		if time.Now().After(deadline) {
			r := e.do(http.MethodGet, "/v1/jobs/"+held, "", globex...)
			t.Fatalf("after 10s, %v waits held and %v requests in flight, want 3 and 0; another tenant's GET now: %d %s",
				testutil.ToFloat64(m.waiters), testutil.ToFloat64(m.inFlight), r.status, r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// globex's work goes through, more requests in turn than max_in_flight.
	own := e.enqueue(t, "own", globex...)
	// globex's first wait is held, the gateway's 4th (max_waiters); its
	// second is answered at once.
	ownWait := make(chan reply, 1)
	go func() { ownWait <- e.do(http.MethodGet, "/v1/jobs/"+own+"?wait=60", "", globex...) }()
	for testutil.ToFloat64(m.waiters) != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("globex's wait is not held after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := e.do(http.MethodGet, "/v1/jobs/"+own+"?wait=60", "", globex...); r.status != http.StatusOK || r.header.Get(HeaderWaitRefused) != "max_waiters" {
		t.Fatalf("a wait beyond max_waiters: %d %s (%s %q), want 200 at once with max_waiters", r.status, r.body, HeaderWaitRefused, r.header.Get(HeaderWaitRefused))
	}
	for range 4 {
		if r := e.do(http.MethodGet, "/v1/jobs/"+own, "", globex...); r.status != http.StatusOK {
			t.Fatalf("globex's GET while acme holds its waits: %d %s %v, want 200", r.status, r.body, r.err)
		}
	}
	if r := e.do(http.MethodPost, "/v1/jobs/"+own+"/cancel", "", globex...); r.status != http.StatusOK || !strings.Contains(r.body, `"cancelled"`) {
		t.Fatalf("globex's cancel while acme holds its waits: %d %s %v, want 200 cancelled", r.status, r.body, r.err)
	}
	if r := <-ownWait; r.status != http.StatusOK || !strings.Contains(r.body, `"cancelled"`) {
		t.Fatalf("globex's held wait after its cancel: %d %s %v, want 200 cancelled", r.status, r.body, r.err)
	}

	// acme's 4th wait (request 5): the job as it stands, at once.
	r := e.do(http.MethodGet, "/v1/jobs/"+held+"?wait=60", "", acme...)
	var doc openapi.Job
	if r.err != nil || r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &doc) != nil || doc.Status != openapi.JobStatusQueued {
		t.Fatalf("acme's wait beyond max_waiters_per_tenant: %d %s %v, want 200 with the queued job", r.status, r.body, r.err)
	}
	if got := r.header.Get(HeaderWaitRefused); got != "max_waiters_per_tenant" {
		t.Errorf("%s: %q, want max_waiters_per_tenant", HeaderWaitRefused, got)
	}
	if n := testutil.ToFloat64(m.waitsRefused.WithLabelValues("max_waiters_per_tenant")); n != 1 {
		t.Errorf("idemgate_job_waits_refused_total{bound=max_waiters_per_tenant} = %v, want 1", n)
	}

	// Request 6 is acme's last; then GET and cancel are over its budget.
	if r := e.do(http.MethodGet, "/v1/jobs/"+held, "", acme...); r.status != http.StatusOK {
		t.Fatalf("acme's 6th request: %d %s %v, want 200", r.status, r.body, r.err)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/jobs/" + held},
		{http.MethodGet, "/v1/jobs/" + held + "?wait=60"},
		{http.MethodPost, "/v1/jobs/" + held + "/cancel"},
	} {
		r := e.do(c.method, c.path, "", acme...)
		if r.status != http.StatusTooManyRequests || r.slug() != "rate-limited" || r.header.Get("Retry-After") == "" {
			t.Errorf("acme's %s %s over its rate limit: %d %s (Retry-After %q), want 429 rate-limited with Retry-After",
				c.method, c.path, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	if rec, err := e.records.Get(t.Context(), "acme", held); err != nil || rec.Status != job.StatusQueued {
		t.Fatalf("acme's job after a cancel over the rate limit: %q %v, want queued", rec.Status, err)
	}

	// The held waits end with the job, and every count is back to zero.
	if err := e.records.SetStatus(t.Context(), held, job.StatusSucceeded, 1, "inv-1", ""); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case r := <-answers:
			if r.err != nil || r.status != http.StatusOK || !strings.Contains(r.body, `"succeeded"`) || r.header.Get(HeaderWaitRefused) != "" {
				t.Errorf("a held wait: %d %s %v, want 200 succeeded", r.status, r.body, r.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a held wait did not answer within 20s of the job's end")
		}
	}
	// A handler's counts drop just after its answer is sent.
	deadline = time.Now().Add(20 * time.Second)
	for testutil.ToFloat64(m.waiters) != 0 || testutil.ToFloat64(m.inFlight) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the waits: %v waits held, %v requests in flight, want 0 and 0",
				testutil.ToFloat64(m.waiters), testutil.ToFloat64(m.inFlight))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
