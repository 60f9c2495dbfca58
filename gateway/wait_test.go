package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// countingTracer counts the queries its pool runs on the jobs table: n
// all of them, watched those of the watcher (one read of every watched
// job, "id = ANY").
type countingTracer struct{ n, watched atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "FROM jobs") {
		c.n.Add(1)
		if strings.Contains(data.SQL, "= ANY(") {
			c.watched.Add(1)
		}
	}
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// signalledWatcher tells the test each time a GET starts waiting.
type signalledWatcher struct {
	*job.Watcher
	watching chan string
}

func (s signalledWatcher) Watch(ctx context.Context, id string) *job.Watch {
	x := s.Watcher.Watch(ctx, id)
	s.watching <- id
	return x
}

// waitEnv is a gateway serving GET /v1/jobs/{id} from a jobs table in
// PostgreSQL, woken by a job.Watcher.
type waitEnv struct {
	g       *Gateway
	srv     *httptest.Server
	records *job.Store // on a pool the counter does not see
	pool    *pgxpool.Pool
	queries *countingTracer // the gateway's and the watcher's queries
	gets    atomic.Int64    // the gateway's reads done
	watcher signalledWatcher
}

// startWait serves a gateway whose watcher listens on a connection of its
// own when listen is set, else polls every 200ms.
func startWait(t *testing.T, listen bool, maxWait time.Duration) *waitEnv {
	t.Helper()
	dbURL := testkit.Postgres(t)
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	v := &waitEnv{queries: &countingTracer{}}
	pc.ConnConfig.Tracer = v.queries
	counted, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(counted.Close)
	v.pool = testkit.PoolAt(t, dbURL)
	v.records = job.NewStore(v.pool)

	wo := job.WatcherOptions{Poll: 200 * time.Millisecond, Logger: testkit.Logger()}
	if listen {
		wo.Connect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, dbURL) }
	}
	w := job.NewWatcher(counted, wo)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	if listen {
		deadline := time.Now().Add(20 * time.Second)
		for !w.Listening() {
			if time.Now().After(deadline) {
				t.Fatal("the watcher is not listening after 20s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	v.watcher = signalledWatcher{Watcher: w, watching: make(chan string, 2000)}

	rs := job.NewStore(counted)
	opts := testOptions(fakeJobs{get: func(ctx context.Context, tenant, id string) (job.Row, error) {
		defer v.gets.Add(1)
		return rs.Get(ctx, tenant, id)
	}})
	opts.JobWatcher = v.watcher
	opts.MaxWait = maxWait
	// One tenant holds up to a thousand waits here (waiters_test.go
	// tests the bounds).
	opts.MaxWaiters, opts.MaxWaitersPerTenant = 2000, 2000
	v.g = newTestGateway(t, opts)
	v.srv = httptest.NewServer(v.g.Handler())
	t.Cleanup(v.srv.Close)
	return v
}

func (v *waitEnv) insert(t *testing.T, key string) string {
	t.Helper()
	id := job.ID("acme", "invoices", key)
	_, err := v.pool.Exec(t.Context(), `INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload)
VALUES ($1, 'acme', 'invoices', $2, 'invoice.create', 'default', 'invoice:'||$2, '{}')`, id, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (v *waitEnv) set(t *testing.T, id string, s job.Status) {
	t.Helper()
	if err := v.records.SetStatus(context.Background(), id, s, 1, "inv-1", ""); err != nil {
		t.Error(err)
	}
}

// awaitWatching returns once a GET has started waiting.
func (v *waitEnv) awaitWatching(t *testing.T) {
	t.Helper()
	select {
	case <-v.watcher.watching:
	case <-time.After(20 * time.Second):
		t.Fatal("no GET started waiting within 20s")
	}
}

type answer struct {
	status int
	etag   string
	doc    openapi.Job
	body   string
	at     time.Time
	err    error
}

// get calls GET /v1/jobs/{id}{query} on the gateway, with header pairs.
func (v *waitEnv) get(id, query string, header ...string) answer {
	req, err := http.NewRequest(http.MethodGet, v.srv.URL+"/v1/jobs/"+id+query, nil)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := v.srv.Client().Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, etag: resp.Header.Get("ETag"), body: string(b), at: time.Now(), err: err}
	if resp.StatusCode == http.StatusOK {
		a.err = json.Unmarshal(b, &a.doc)
	}
	return a
}

// getAsync starts a get and returns where its answer will come.
func (v *waitEnv) getAsync(id, query string, header ...string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- v.get(id, query, header...) }()
	return ch
}

func receive(t *testing.T, ch <-chan answer, within time.Duration) answer {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a
	case <-time.After(within):
		t.Fatalf("no answer within %s", within)
		return answer{}
	}
}

// ?wait= answers as soon as the job is final: measured from the moment the
// final status was committed to the moment the client had the answer.
func TestWaitAnswersWhenTheJobEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen bool
		median time.Duration // the promise for a notified wait
		max    time.Duration // generous: a loaded 2-core machine under -race
	}{
		{"notified", true, 100 * time.Millisecond, time.Second},
		{"polled without a listener", false, time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := startWait(t, tc.listen, 30*time.Second)
			var lat []time.Duration
			for i := range 5 {
				id := v.insert(t, fmt.Sprintf("k%d", i))
				ch := v.getAsync(id, "?wait=10")
				v.awaitWatching(t)
				v.set(t, id, job.StatusProcessing)
				v.set(t, id, job.StatusSucceeded)
				committed := time.Now()
				a := receive(t, ch, 15*time.Second)
				if a.status != http.StatusOK || a.doc.Status != openapi.JobStatusSucceeded || a.etag == "" {
					t.Fatalf("answer %d %q etag %q, want 200 succeeded with an ETag", a.status, a.doc.Status, a.etag)
				}
				lat = append(lat, a.at.Sub(committed))
			}
			slices.Sort(lat)
			t.Logf("from the commit of the final status to the answer: median %s, max %s", lat[len(lat)/2], lat[len(lat)-1])
			if lat[len(lat)/2] > tc.median || lat[len(lat)-1] > tc.max {
				t.Fatalf("answers came %v after the job's end, want a median within %s and all within %s", lat, tc.median, tc.max)
			}
		})
	}
}

// With If-None-Match the wait ends at any change of the document, 200 with
// the new one; a wait that ends unchanged is 304, and so is a GET without
// wait whose tag matches.
func TestWaitIfNoneMatch(t *testing.T) {
	t.Parallel()
	v := startWait(t, true, 30*time.Second)
	id := v.insert(t, "k1")
	first := v.get(id, "")
	if first.status != http.StatusOK || first.doc.Status != openapi.JobStatusQueued || !strings.HasPrefix(first.etag, `"`) {
		t.Fatalf("GET: %d %q etag %q", first.status, first.doc.Status, first.etag)
	}
	if again := v.get(id, ""); again.etag != first.etag {
		t.Fatalf("the same document has two ETags: %s and %s", first.etag, again.etag)
	}

	if a := v.get(id, "", "If-None-Match", first.etag); a.status != http.StatusNotModified || a.body != "" || a.etag != first.etag {
		t.Fatalf("If-None-Match of the current document without wait: %d %q etag %q, want 304 at once", a.status, a.body, a.etag)
	}

	ch := v.getAsync(id, "?wait=20", "If-None-Match", first.etag)
	v.awaitWatching(t)
	v.set(t, id, job.StatusProcessing) // not final: a change all the same
	changed := receive(t, ch, 15*time.Second)
	if changed.status != http.StatusOK || changed.doc.Status != openapi.JobStatusProcessing || changed.etag == first.etag {
		t.Fatalf("after a change: %d %q etag %q (was %q), want 200 processing with a new ETag", changed.status, changed.doc.Status, changed.etag, first.etag)
	}

	// A stale tag answers at once with the current document.
	if a := v.get(id, "?wait=20", "If-None-Match", first.etag); a.status != http.StatusOK || a.etag != changed.etag {
		t.Fatalf("stale If-None-Match: %d etag %q, want 200 at once with %q", a.status, a.etag, changed.etag)
	}

	start := time.Now()
	a := v.get(id, "?wait=1", "If-None-Match", `W/"other", `+changed.etag)
	if a.err != nil || a.status != http.StatusNotModified || a.body != "" || a.etag != changed.etag {
		t.Fatalf("a wait that ends unchanged: %d %q etag %q err %v, want 304 with the same ETag", a.status, a.body, a.etag, a.err)
	}
	if took := time.Since(start); took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("a 1s wait ended unchanged after %s", took)
	}
}

// A wait longer than max_wait is clamped, not refused; a wait that is not
// a whole number of seconds is refused.
func TestWaitIsClampedAndChecked(t *testing.T) {
	t.Parallel()
	v := startWait(t, true, time.Second)
	id := v.insert(t, "k1")
	for _, wait := range []string{"3600", "99999999999999999999999"} {
		start := time.Now()
		a := v.get(id, "?wait="+wait)
		took := time.Since(start)
		if a.err != nil || a.status != http.StatusOK || a.doc.Status != openapi.JobStatusQueued {
			t.Fatalf("wait=%s: %d %s %v, want 200 queued at the end of max_wait", wait, a.status, a.body, a.err)
		}
		if took < 900*time.Millisecond || took > 10*time.Second {
			t.Fatalf("wait=%s with max_wait 1s answered after %s", wait, took)
		}
	}
	for _, q := range []string{"?wait=-1", "?wait=1.5", "?wait=abc", "?wait=", "?wait=1&wait=2", "?wait=%2B1", "?wait=1s"} {
		a := v.get(id, q)
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, "bad-request") || !strings.Contains(a.body, "wait") {
			t.Errorf("%s: %d %s, want 400 bad-request naming wait", q, a.status, a.body)
		}
	}
	if a := v.get(id, "?wait=0"); a.status != http.StatusOK {
		t.Errorf("wait=0: %d, want 200 at once", a.status)
	}
}

// A thousand callers waiting on one job cost one read of the job for the
// change, not a read each.
func TestThousandWaitersCostOneReadPerChange(t *testing.T) {
	v := startWait(t, true, 30*time.Second)
	id := v.insert(t, "k1")
	const n = 1000
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	answers := make(chan answer, n)
	for range n {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, v.srv.URL+"/v1/jobs/"+id+"?wait=20", nil)
			req.Header.Set("Authorization", "Bearer "+testAPIKey)
			resp, err := client.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var a answer
			a.status = resp.StatusCode
			a.err = json.NewDecoder(resp.Body).Decode(&a.doc)
			answers <- a
		}()
	}
	for range n {
		v.awaitWatching(t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for v.gets.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d GETs read the job within 30s", v.gets.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each GET read the job once before it waited; from here on, only the
	// watcher reads. (The watcher itself may have read the watched job
	// meanwhile: on a loaded machine its listener can be slow to confirm,
	// and it polls until it is.)
	before, watchedBefore := v.queries.n.Load(), v.queries.watched.Load()
	if own := before - watchedBefore; own != n {
		t.Errorf("%d reads by %d GETs before the change, want one each", own, n)
	}
	v.set(t, id, job.StatusSucceeded)
	for range n {
		a := receive(t, answers, 30*time.Second)
		if a.status != http.StatusOK || a.doc.Status != openapi.JobStatusSucceeded {
			t.Fatalf("a waiter got %d %q, want 200 succeeded", a.status, a.doc.Status)
		}
	}
	watcherReads := v.queries.watched.Load() - watchedBefore
	getReads := v.queries.n.Load() - before - watcherReads
	t.Logf("%d waiters on one job, one change: %d reads by the watcher, %d by the GETs", n, watcherReads, getReads)
	// The change costs the watcher's read for all of them (one, or a few
	// more if it polled meanwhile), never a read per waiter.
	if getReads != 0 || watcherReads < 1 || watcherReads > 5 {
		t.Fatalf("%d waiters cost %d reads by the watcher and %d by the GETs for one change, want about 1 and 0", n, watcherReads, getReads)
	}
}

// A gateway that starts draining answers its waits at once with the
// current document.
func TestWaitEndsWhenTheGatewayDrains(t *testing.T) {
	t.Parallel()
	v := startWait(t, true, 30*time.Second)
	id := v.insert(t, "k1")
	ch := v.getAsync(id, "?wait=25")
	v.awaitWatching(t)
	start := time.Now()
	v.g.StartDraining()
	a := receive(t, ch, 10*time.Second)
	if a.status != http.StatusOK || a.doc.Status != openapi.JobStatusQueued {
		t.Fatalf("draining: %d %q, want 200 with the current document", a.status, a.doc.Status)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the wait ended %s after the drain began", took)
	}
}

// The enqueue answer carries the ETag a GET of the same document gives,
// and the tag does not depend on the time zone the times are read in.
func TestJobETagIsTheDocuments(t *testing.T) {
	t.Parallel()
	rec := job.Row{ID: "job_1", Task: "invoice.create", Status: job.StatusQueued, Tenant: "acme", CreatedAt: created, UpdatedAt: updated}
	g := newTestGateway(t, testOptions(fakeJobs{
		submit: func(context.Context, job.Request) (job.Row, error) { return rec, nil },
		get:    func(context.Context, string, string) (job.Row, error) { return rec, nil },
	}))
	posted, _ := serve(t, g.Handler(), http.MethodPost, "/v1/invoices", `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`,
		"Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "k1", "Content-Type", "application/json")
	got, _ := serve(t, g.Handler(), http.MethodGet, "/v1/jobs/job_1", "", "Authorization", "Bearer "+testAPIKey)
	if posted.StatusCode != http.StatusAccepted || posted.Header.Get("ETag") == "" || posted.Header.Get("ETag") != got.Header.Get("ETag") {
		t.Fatalf("202 ETag %q, GET ETag %q: want the same tag", posted.Header.Get("ETag"), got.Header.Get("ETag"))
	}
	zoned := rec
	zone := time.FixedZone("UTC+5", 5*3600)
	zoned.CreatedAt, zoned.UpdatedAt = created.In(zone), updated.In(zone)
	if jobETag(jobDocument(zoned)) != jobETag(jobDocument(rec)) {
		t.Fatal("the ETag depends on the time zone of the document's times")
	}
	moved := rec
	moved.Status = job.StatusProcessing
	if jobETag(jobDocument(moved)) == jobETag(jobDocument(rec)) {
		t.Fatal("two documents share an ETag")
	}
}

// FuzzParseJobWait: whatever the query and If-None-Match, the wait is
// refused or lies within [0, max], and a refusal is a 400 problem.
func FuzzParseJobWait(f *testing.F) {
	for _, s := range []string{"wait=10", "wait=-1", "wait=1.5", "wait=", "wait=99999999999999999999", "wait=1&wait=2", "x=1", "wait=%00"} {
		f.Add(s, `"abc", W/"def"`)
	}
	f.Fuzz(func(t *testing.T, query, inm string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/jobs/job_1", nil)
		r.URL.RawQuery = query
		r.Header.Set("If-None-Match", inm)
		const max = 30 * time.Second
		jw, err := parseJobWait(r, max)
		if err != nil {
			if !strings.Contains(err.Error(), "bad request") {
				t.Fatalf("%q: refused with %v, want a bad request", query, err)
			}
			return
		}
		if jw.d < 0 || jw.d > max {
			t.Fatalf("%q: wait %v outside [0, %v]", query, jw.d, max)
		}
		for _, tag := range jw.ifNoneMatch {
			if tag == "" {
				t.Fatalf("%q: an empty tag", inm)
			}
		}
	})
}
