package workers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/receiver"
)

// callbackSecret signs the test callbacks.
const callbackSecret = "whsec_dGVzdC1jYWxsYmFjay1zZWNyZXQtMzItYnl0ZXMhIQ=="

// quietKind is a task that declares no on_final.
const quietKind = "effect.quiet"

// sent is one POST the callback receiver got.
type sent struct {
	id, event string
	status    job.Status
	attempts  int
	body      string
	verified  bool
	// tenant is the body's data.tenant, header its Idemgate-Tenant.
	tenant, header string
}

// callbackReceiver verifies each callback with package receiver, answers
// the first failFirst POSTs of each webhook-id with 503, and applies an
// event once per webhook-id, as a receiver must.
type callbackReceiver struct {
	verifier  *receiver.Verifier
	failFirst int
	// hold, when set, is called after an event is applied and before the
	// answer is written.
	hold func()

	mu      sync.Mutex
	sends   []sent
	applied map[string]int
}

func newCallbackReceiver(t *testing.T, failFirst int) (*callbackReceiver, string) {
	t.Helper()
	v, err := receiver.NewVerifier(callbackSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &callbackReceiver{verifier: v, failFirst: failFirst, applied: map[string]int{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL + "/hooks/final"
}

func (c *callbackReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Tenant   string     `json:"tenant"`
			Status   job.Status `json:"status"`
			Attempts int        `json:"attempts"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	id := r.Header.Get(receiver.HeaderWebhookID)
	s := sent{id: id, event: ev.Type, status: ev.Data.Status, attempts: ev.Data.Attempts, body: string(body),
		verified: c.verifier.Verify(r.Header, body) == nil, tenant: ev.Data.Tenant, header: r.Header.Get("Idemgate-Tenant")}
	c.mu.Lock()
	c.sends = append(c.sends, s)
	n := 0
	for _, p := range c.sends {
		if p.id == id {
			n++
		}
	}
	if !s.verified {
		c.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if n <= c.failFirst {
		c.mu.Unlock()
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	if c.applied[id] == 0 {
		c.applied[id]++
	}
	hold := c.hold
	c.mu.Unlock()
	if hold != nil {
		hold()
	}
	w.WriteHeader(http.StatusNoContent)
}

// of returns the POSTs whose webhook-id starts with jobID.
func (c *callbackReceiver) of(jobID string) []sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []sent
	for _, s := range c.sends {
		if strings.HasPrefix(s.id, jobID+":") {
			out = append(out, s)
		}
	}
	return out
}

func (c *callbackReceiver) appliedOf(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied[id]
}

// callbackEnv is a worker running two tasks through the framework, their
// jobs recorded by a Submitter and followed by Store.Follow: effect.apply
// declares on_final, effect.quiet does not.
type callbackEnv struct {
	*serverEnv
	submitter *job.Submitter
	records   *job.Store
	spec      *job.Spec
	quiet     *job.Spec
	// transient counts the failures still to come, per order id.
	mu        sync.Mutex
	transient map[string]int
}

func newCallbackEnv(t *testing.T, url string, maxAttempts int) *callbackEnv {
	t.Helper()
	s := newServerEnv(t)
	e := &callbackEnv{serverEnv: s, submitter: job.NewSubmitter(s.pool, s.client), records: job.NewStore(s.pool),
		transient: map[string]int{}}
	e.spec = orderSpec(t, s.queue)
	var err error
	if e.quiet, err = job.NewSpec(quietKind, orderSchema, "quiet:{order_id}", ""); err != nil {
		t.Fatal(err)
	}
	e.quiet.Queue = s.queue
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(callbackSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	e.spec.OnFinal = &job.Callback{HTTP: job.HTTP{URL: url, Secrets: [][]byte{key}, Timeout: 10 * time.Second}, MaxAttempts: maxAttempts}

	deps := s.deps(nil, 20*time.Second)
	deps.OnStatus = e.records.Follow
	fn := func(ctx context.Context, j Job[order]) (string, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case strings.HasPrefix(j.Payload.OrderID, "bad-"):
			return "", Permanent(errors.New("refused"))
		case e.transient[j.Payload.OrderID] > 0:
			e.transient[j.Payload.OrderID]--
			return "", errors.New("not yet")
		}
		return "ref-" + j.Payload.OrderID, nil
	}
	mux := asynq.NewServeMux()
	mux.Handle(kind, Handle(deps, kind, orderKey, orderResource, fn))
	mux.Handle(quietKind, Handle(deps, quietKind, func(o order) string { return "quiet:" + o.OrderID }, func(order) string { return "" }, fn))
	s.start(t, mux, Config{MaxAttempts: 5})
	return e
}

func (e *callbackEnv) submit(t *testing.T, spec *job.Spec, orderID string) string {
	t.Helper()
	return e.submitAs(t, "acme", spec, orderID)
}

func (e *callbackEnv) submitAs(t *testing.T, tenant string, spec *job.Spec, orderID string) string {
	t.Helper()
	rec, err := e.submitter.Submit(t.Context(), job.Request{Tenant: tenant, Route: "r", Key: "k-" + orderID, Spec: spec,
		Body: []byte(fmt.Sprintf(`{"order_id": %q}`, orderID))})
	if err != nil {
		t.Fatal(err)
	}
	return rec.ID
}

func (e *callbackEnv) final(t *testing.T, id string) job.Row {
	t.Helper()
	var rec job.Row
	testkit.Eventually(t, "job "+id+" final", 60*time.Second, func() bool {
		var err error
		rec, err = e.records.ByID(t.Context(), id)
		return err == nil && rec.Status.Final()
	})
	return rec
}

// dispatcher returns a FinalCallbacks on the env's jobs with a short
// backoff, named worker.
func (e *callbackEnv) dispatcher(worker string) *FinalCallbacks {
	return NewFinalCallbacks(FinalCallbacksConfig{
		DB: e.pool, Specs: []*job.Spec{e.spec, e.quiet}, Worker: worker, Logger: e.deps(nil, time.Second).Logger,
		Interval: 20 * time.Millisecond, Batch: 4,
		Backoff: func(int) time.Duration { return 50 * time.Millisecond },
		Document: func(r job.Row) any {
			return map[string]any{"id": r.ID, "status": r.Status, "attempts": r.Attempts}
		},
	})
}

// runUntil runs f's rounds until cond holds.
func runUntil(t *testing.T, f *FinalCallbacks, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, what, 60*time.Second, func() bool {
		if _, err := f.Round(t.Context()); err != nil {
			t.Fatalf("round: %v", err)
		}
		return cond()
	})
}

// TestFinalCallbackOncePerFinalStatus: a job that took three attempts, to
// a receiver that fails twice, is applied once, from three POSTs of one
// signed event; a task without on_final sends nothing; a job replayed
// from the dead-letter queue that ends again is a new event with a new
// webhook-id.
func TestFinalCallbackOncePerFinalStatus(t *testing.T) {
	t.Parallel()
	rcv, url := newCallbackReceiver(t, 2)
	e := newCallbackEnv(t, url, 10)
	e.transient["flaky"] = 2
	flaky := e.submit(t, e.spec, "flaky")
	quiet := e.submit(t, e.quiet, "quiet")
	bad := e.submit(t, e.spec, "bad-1")
	if rec := e.final(t, flaky); rec.Status != job.StatusSucceeded || rec.Attempts != 3 {
		t.Fatalf("flaky job: %s after %d attempts, want succeeded after 3", rec.Status, rec.Attempts)
	}
	e.final(t, quiet)
	e.final(t, bad)

	f := e.dispatcher("w1")
	runUntil(t, f, "both events applied", func() bool {
		return rcv.appliedOf(flaky+":final") == 1 && rcv.appliedOf(bad+":final") == 1
	})
	// More rounds find nothing more to send.
	for range 5 {
		if _, err := f.Round(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	got := rcv.of(flaky)
	if len(got) != 3 {
		t.Fatalf("flaky: %d POSTs, want 3 (two answered 503, one applied): %+v", len(got), got)
	}
	for _, s := range got {
		if s.id != flaky+":final" || s.event != "job.succeeded" || s.status != job.StatusSucceeded || s.attempts != 3 || !s.verified {
			t.Errorf("flaky: POST %+v, want webhook-id %s:final, job.succeeded with the document after 3 attempts, signed", s, flaky)
		}
		if s.body != got[0].body {
			t.Errorf("flaky: the body changed between attempts:\n%s\n%s", got[0].body, s.body)
		}
	}
	if b := rcv.of(bad); len(b) != 3 || b[2].event != "job.failed" || b[2].status != job.StatusFailed {
		t.Errorf("bad: POSTs %+v, want three of job.failed", b)
	}
	if q := rcv.of(quiet); len(q) != 0 {
		t.Errorf("a task without on_final sent %d callbacks", len(q))
	}
	var rows int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM job_callbacks WHERE job_id = $1`, quiet).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("a task without on_final has %d outbox rows (%v)", rows, err)
	}

	// explain's source: the event delivered at its third attempt, each
	// attempt in the ledger.
	states, err := job.NewCallbacks(e.pool).OfJob(t.Context(), flaky)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].ID != flaky+":final" || states[0].DeliveredAt == nil || len(states[0].Tries) != 3 {
		t.Fatalf("the outbox and ledger of flaky: %+v", states)
	}
	for i, a := range states[0].Tries {
		want, status := job.CallbackRetry, http.StatusServiceUnavailable
		if i == 2 {
			want, status = job.CallbackDelivered, http.StatusNoContent
		}
		if a.Attempt != i+1 || a.Outcome != want || a.Status == nil || *a.Status != status || a.Worker != "w1" {
			t.Errorf("ledger row %d: %+v, want attempt %d %s with %d by w1", i, a, i+1, want, status)
		}
	}

	// The dead-letter queue replays bad, and this time it succeeds.
	if err := e.records.Requeue(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	if err := e.records.SetStatus(t.Context(), bad, job.StatusSucceeded, 2, "ref-bad-1", ""); err != nil {
		t.Fatal(err)
	}
	runUntil(t, f, "the replay's event applied", func() bool { return rcv.appliedOf(bad+":final:2") == 1 })
	if b := rcv.of(bad); b[len(b)-1].event != "job.succeeded" || b[len(b)-1].id != bad+":final:2" {
		t.Errorf("after the replay: %+v, want job.succeeded under %s:final:2", b[len(b)-1], bad)
	}
	if n := rcv.appliedOf(bad + ":final"); n != 1 {
		t.Errorf("the first event applied %d times", n)
	}
}

// TestFinalCallbackNamesTenant: the callback URL is the task's, shared by
// every tenant, so each event says whose job it is: the job's tenant in
// the signed body's data, and in Idemgate-Tenant.
func TestFinalCallbackNamesTenant(t *testing.T) {
	t.Parallel()
	rcv, url := newCallbackReceiver(t, 0)
	e := newCallbackEnv(t, url, 10)
	ids := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		ids[tenant] = e.submitAs(t, tenant, e.spec, "ok-"+tenant)
	}
	for _, id := range ids {
		e.final(t, id)
	}
	f := e.dispatcher("w1")
	runUntil(t, f, "both events applied", func() bool {
		return rcv.appliedOf(ids["acme"]+":final") == 1 && rcv.appliedOf(ids["globex"]+":final") == 1
	})
	for tenant, id := range ids {
		got := rcv.of(id)
		if len(got) != 1 {
			t.Fatalf("%s: %d POSTs, want 1", tenant, len(got))
		}
		if s := got[0]; !s.verified || s.tenant != tenant || s.header != tenant {
			t.Errorf("%s's event: signed %v, data.tenant %q, Idemgate-Tenant %q; want both %q, signed\n%s",
				tenant, s.verified, s.tenant, s.header, tenant, s.body)
		}
	}
}

// TestFinalCallbackSlowReceiver: a receiver that holds its POSTs delays
// no other receiver's events, and holds no more than its own slots. Three
// events of a task whose receiver holds every POST until the test lets
// it go, then an event of another task whose receiver answers at once:
// the slow receiver gets two POSTs at a time (PerReceiver), never three,
// and the fast one gets its event while the slow ones are still held.
func TestFinalCallbackSlowReceiver(t *testing.T) {
	t.Parallel()
	slow, slowURL := newCallbackReceiver(t, 0)
	fast, fastURL := newCallbackReceiver(t, 0)
	release := make(chan struct{})
	var (
		mu                   sync.Mutex
		holding, most, ended int
	)
	entered := make(chan struct{}, 8)
	slow.hold = func() {
		mu.Lock()
		holding++
		most = max(most, holding)
		mu.Unlock()
		entered <- struct{}{}
		select {
		case <-release:
		case <-time.After(3 * time.Minute): // the test failed; do not hang
		}
		mu.Lock()
		holding--
		ended++
		mu.Unlock()
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e := newCallbackEnv(t, slowURL, 10)
	// The slow receiver's POSTs outlast the test: the sender never gives up on them.
	e.spec.OnFinal.HTTP.Timeout = 5 * time.Minute
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(callbackSecret, "whsec_"))
	e.quiet.OnFinal = &job.Callback{HTTP: job.HTTP{URL: fastURL, Secrets: [][]byte{key}, Timeout: 10 * time.Second}, MaxAttempts: 10}

	var slowIDs []string
	for i := range 3 {
		id := e.submit(t, e.spec, fmt.Sprintf("slow-%d", i))
		e.final(t, id)
		slowIDs = append(slowIDs, id)
	}
	f := NewFinalCallbacks(FinalCallbacksConfig{
		DB: e.pool, Specs: []*job.Spec{e.spec, e.quiet}, Worker: "w1", Logger: testkit.Logger(),
		Interval: 20 * time.Millisecond, Concurrency: 4, PerReceiver: 2,
		Document: func(r job.Row) any { return map[string]any{"id": r.ID, "status": r.Status} },
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = f.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	for range 2 {
		select {
		case <-entered:
		case <-time.After(time.Minute):
			t.Fatal("the slow receiver never got two POSTs")
		}
	}
	fastID := e.submit(t, e.quiet, "fast-1")
	e.final(t, fastID)
	testkit.Eventually(t, "the fast receiver's event applied", 60*time.Second, func() bool { return fast.appliedOf(fastID+":final") == 1 })
	mu.Lock()
	heldThen, endedThen := holding, ended
	mu.Unlock()
	if endedThen != 0 || heldThen != 2 {
		t.Errorf("when the fast receiver got its event, the slow one held %d POSTs and had answered %d; want 2 held, none answered", heldThen, endedThen)
	}
	slow.mu.Lock()
	got := len(slow.sends)
	slow.mu.Unlock()
	if n := got; n != 2 {
		t.Errorf("the slow receiver got %d POSTs while two were held, want 2 (PerReceiver)", n)
	}

	close(release)
	testkit.Eventually(t, "every slow event applied", 60*time.Second, func() bool {
		for _, id := range slowIDs {
			if slow.appliedOf(id+":final") != 1 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if most != 2 {
		t.Errorf("the slow receiver held %d POSTs at once, want at most PerReceiver, 2", most)
	}
}

// TestFinalCallbackBound: a receiver that never succeeds gets
// max_attempts POSTs; the callback is then abandoned, recorded so, and
// never sent again.
func TestFinalCallbackBound(t *testing.T) {
	t.Parallel()
	rcv, url := newCallbackReceiver(t, 1<<30)
	e := newCallbackEnv(t, url, 3)
	id := e.submit(t, e.spec, "ok-1")
	e.final(t, id)
	f := e.dispatcher("w1")
	obs := &countingCallbacks{n: map[job.CallbackOutcome]int{}}
	f.observer = obs
	states := func() []job.CallbackState {
		s, err := job.NewCallbacks(e.pool).OfJob(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	runUntil(t, f, "the callback abandoned", func() bool {
		s := states()
		return len(s) == 1 && s[0].AbandonedAt != nil
	})
	for range 5 {
		if _, err := f.Round(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(rcv.of(id)); n != 3 {
		t.Errorf("%d POSTs, want max_attempts, 3", n)
	}
	s := states()[0]
	if s.Attempts != 3 || s.DeliveredAt != nil || s.LastStatus == nil || *s.LastStatus != http.StatusServiceUnavailable || len(s.Tries) != 3 ||
		s.Tries[0].Outcome != job.CallbackRetry || s.Tries[2].Outcome != job.CallbackAbandoned || s.Tries[2].Error == nil {
		t.Errorf("abandoned callback: %+v, want 3 attempts, the last abandoned with its error", s)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.n[job.CallbackRetry] != 2 || obs.n[job.CallbackAbandoned] != 1 || obs.n[job.CallbackDelivered] != 0 || obs.task != kind {
		t.Errorf("observed %v for %q, want 2 retries and 1 abandoned for %s", obs.n, obs.task, kind)
	}
}

// countingCallbacks is a CallbackObserver that counts.
type countingCallbacks struct {
	mu   sync.Mutex
	task string
	n    map[job.CallbackOutcome]int
}

func (c *countingCallbacks) CallbackAttempt(task string, outcome job.CallbackOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.task = task
	c.n[outcome]++
}

// TestFinalCallbackCrashResends: a worker dies after the receiver applied
// the event and before the attempt is recorded. Once its claim runs out,
// another worker sends the same event again, with the same webhook-id and
// body, and the receiver, deduping by it, applies it once.
func TestFinalCallbackCrashResends(t *testing.T) {
	t.Parallel()
	rcv, url := newCallbackReceiver(t, 0)
	e := newCallbackEnv(t, url, 10)
	id := e.submit(t, e.spec, "ok-2")
	e.final(t, id)

	ctx, die := context.WithCancel(t.Context())
	arrived, dead := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rcv.hold = func() {
		once.Do(func() {
			close(arrived)
			// The answer comes only once the worker's round has returned:
			// released by the kill itself, the 200 could reach the worker
			// before it saw its context end, and be recorded as delivered.
			select {
			case <-dead:
			case <-t.Context().Done():
			}
		})
	}
	doomed := e.dispatcher("doomed")
	done := make(chan error, 1)
	go func() {
		_, err := doomed.Round(ctx)
		done <- err
	}()
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the doomed worker never sent the callback")
	}
	die()
	<-done
	close(dead)
	var due time.Time
	if err := e.pool.QueryRow(t.Context(), `SELECT due_at FROM job_callbacks WHERE job_id = $1`, id).Scan(&due); err != nil {
		t.Fatal(err)
	}
	survivor := e.dispatcher("survivor")
	// While the claim holds, nobody else sends it.
	if _, err := survivor.Round(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(rcv.of(id)); n != 1 {
		t.Fatalf("%d POSTs while the dead worker's claim held, want 1", n)
	}
	if !due.After(time.Now().Add(20 * time.Second)) {
		t.Errorf("the claim runs out at %s, want after the POST's timeout", due)
	}
	// The claim runs out.
	if _, err := e.pool.Exec(t.Context(), `UPDATE job_callbacks SET due_at = now() WHERE job_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	runUntil(t, survivor, "the event delivered again", func() bool { return len(rcv.of(id)) == 2 })
	got := rcv.of(id)
	if got[0].id != id+":final" || got[1].id != got[0].id || got[1].body != got[0].body {
		t.Errorf("the resend: %+v then %+v, want the same webhook-id and body", got[0], got[1])
	}
	if n := rcv.appliedOf(id + ":final"); n != 1 {
		t.Errorf("applied %d times, want once", n)
	}
	states, err := job.NewCallbacks(e.pool).OfJob(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s := states[0]; s.DeliveredAt == nil || s.Attempts != 2 || len(s.Tries) != 1 || s.Tries[0].Attempt != 2 || s.Tries[0].Worker != "survivor" {
		t.Errorf("outbox %+v, want delivered at attempt 2 by the survivor (the dead worker's attempt unrecorded)", s)
	}
}

// TestFinalCallbacksShared: two workers' dispatchers on the same jobs
// send each event once.
func TestFinalCallbacksShared(t *testing.T) {
	t.Parallel()
	rcv, url := newCallbackReceiver(t, 0)
	e := newCallbackEnv(t, url, 10)
	var ids []string
	for i := range 12 {
		ids = append(ids, e.submit(t, e.spec, fmt.Sprintf("many-%d", i)))
	}
	for _, id := range ids {
		e.final(t, id)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, name := range []string{"w1", "w2"} {
		f := e.dispatcher(name)
		wg.Go(func() {
			_ = f.Run(ctx)
		})
	}
	testkit.Eventually(t, "every event applied", 60*time.Second, func() bool {
		for _, id := range ids {
			if rcv.appliedOf(id+":final") != 1 {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	for _, id := range ids {
		if n := len(rcv.of(id)); n != 1 {
			t.Errorf("%s: %d POSTs, want 1", id, n)
		}
	}
	var workers int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(DISTINCT worker) FROM job_callback_attempts`).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events sent by %d workers", len(ids), workers)
}

// TestDefaultCallbackBackoff: the n-th retry waits between half and all of
// 10s·2^(n−1), at most an hour, as docs/guide/jobs/final-callbacks.md says.
func TestDefaultCallbackBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt int
		full    time.Duration
	}{{1, 10 * time.Second}, {2, 20 * time.Second}, {4, 80 * time.Second}, {9, 2560 * time.Second}, {10, time.Hour}, {60, time.Hour}} {
		for range 200 {
			if d := DefaultCallbackBackoff(tc.attempt); d < tc.full/2 || d > tc.full {
				t.Fatalf("attempt %d: waits %s, want between %s and %s", tc.attempt, d, tc.full/2, tc.full)
			}
		}
	}
}
