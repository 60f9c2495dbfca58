package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

// partnerSpec is a job delivered over HTTP to url under limits.
func partnerSpec(t testing.TB, url string, uses ...job.FlowLimitUse) *job.Spec {
	t.Helper()
	spec, err := job.NewSpec(kind, []byte(`{
  "type": "object", "required": ["order_id", "account"],
  "properties": {"order_id": {"type": "string"}, "account": {"type": "string"}}
}`), "ship:{order_id}", "order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	spec.HTTP = &job.HTTP{URL: url, Secrets: [][]byte{vectorSecret}, Timeout: 10 * time.Second}
	spec.Limits = uses
	return spec
}

func limitUse(t testing.TB, l job.FlowLimit, key string) job.FlowLimitUse {
	t.Helper()
	tmpl, err := job.ParseTemplate(key)
	if err != nil {
		t.Fatal(err)
	}
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = job.DefaultBurst
	}
	return job.FlowLimitUse{Limit: l, Key: tmpl}
}

func partnerTask(tenant, orderID string) *asynq.Task {
	payload := fmt.Sprintf(`{"order_id": %q, "account": "acct-1"}`, orderID)
	return asynq.NewTaskWithHeaders(kind, []byte(payload),
		map[string]string{job.HeaderTenant: tenant, job.HeaderID: "job-" + orderID})
}

// partner is a receiver that records when each call started and how many
// were in flight at once, by its own clock.
type partner struct {
	mu       sync.Mutex
	starts   []time.Time
	inFlight int
	peak     int
	hold     func(n int) time.Duration
}

func (p *partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.starts = append(p.starts, time.Now())
	n := len(p.starts)
	p.inFlight++
	p.peak = max(p.peak, p.inFlight)
	p.mu.Unlock()
	time.Sleep(p.hold(n))
	p.mu.Lock()
	p.inFlight--
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (p *partner) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.starts)
}

// maxStartsWithin is the most calls that started within any window of
// length d (both ends included).
func maxStartsWithin(starts []time.Time, d time.Duration) int {
	s := slices.Clone(starts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range s {
		for s[i].Sub(s[j]) > d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// TestLimitsHoldAPartnerToItsBudget is the test: 300 jobs for one
// partner under concurrency 4 and 20 starts a second, three workers. The
// partner, by its own clock, never sees more than 4 calls at once nor more
// than 20 (plus the burst, plus a tolerance for the network) in any
// second; every job succeeds with one counted attempt.
func TestLimitsHoldAPartnerToItsBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 15s by design")
	}
	s := newServerEnv(t)
	p := &partner{hold: func(n int) time.Duration {
		// 50 to 250 ms: on average four slots allow about 27 starts a
		// second, so the rate binds, and a run of long calls fills the
		// slots, so the concurrency binds too.
		return time.Duration(50+(n*37)%201) * time.Millisecond
	}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	const (
		jobs        = 300
		concurrency = 4
		rate        = 20
		burst       = job.DefaultBurst
		// tolerance is how many more starts a second the partner may count
		// than were taken: a call taken at the end of one second can reach
		// the partner late, among those of the next.
		tolerance = 2
	)
	use := limitUse(t, job.FlowLimit{Name: "ship-api", Concurrency: concurrency, Rate: rate, Period: time.Second}, "{tenant}")
	spec := partnerSpec(t, srv.URL, use)
	waits := &limitWaits{}
	for range 3 {
		deps := s.deps(waits, 5*time.Second)
		deps.LimitBusy = 100 * time.Millisecond
		mux, err := NewHandlers().Mux(deps, []*job.Spec{spec}, HTTPDelivery{})
		if err != nil {
			t.Fatal(err)
		}
		s.start(t, mux, Config{Concurrency: 5})
	}
	for i := range jobs {
		s.enqueue(t, partnerTask("acme", fmt.Sprintf("o-%03d", i)))
	}

	deadline := time.Now().Add(3 * time.Minute)
	for {
		var done int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM job_executions WHERE status = 'succeeded'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done == jobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs succeeded in 3 minutes", done, jobs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	p.mu.Lock()
	starts, peak := slices.Clone(p.starts), p.peak
	p.mu.Unlock()
	perSecond := maxStartsWithin(starts, time.Second)
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("partner: %d calls over %s, peak %d in flight, at most %d starts in one second", len(starts), span.Round(time.Millisecond), peak, perSecond)

	if len(starts) != jobs {
		t.Errorf("the partner got %d calls for %d jobs", len(starts), jobs)
	}
	if peak > concurrency {
		t.Errorf("the partner saw %d calls in flight at once; the limit is %d", peak, concurrency)
	}
	if perSecond > rate+burst+tolerance {
		t.Errorf("the partner saw %d calls start within one second; the limit is %d/s with burst %d", perSecond, rate, burst)
	}
	// The pace, measured over the whole run: 300 starts at 20/s take at
	// least (300 - burst)/20 s whatever the network did.
	if minSpan := time.Duration(jobs-burst) * time.Second / rate; span < minSpan-time.Second {
		t.Errorf("300 calls started within %s; at 20/s they need about %s", span, minSpan)
	}
	for i := range jobs {
		key := fmt.Sprintf("ship:o-%03d", i)
		rec, err := s.store.Get(t.Context(), "acme", key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != job.StatusSucceeded || rec.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts; want succeeded at the first", key, rec.Status, rec.Attempts)
		}
	}
	var limited int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM job_attempts WHERE outcome = 'limited'`).Scan(&limited); err != nil {
		t.Fatal(err)
	}
	waited, sentBack := waits.counts()
	if waited == 0 {
		t.Error("no delivery waited for the limit: the test did not load it")
	}
	if sentBack != limited {
		t.Errorf("%d deliveries were sent back, and the ledger has %d limited rows", sentBack, limited)
	}
	t.Logf("%d deliveries waited for the limit, %d of them sent back to the queue (ledger rows)", waited, limited)
}

// limitWaits counts the deliveries that waited for a limit, and those
// sent back to the queue.
type limitWaits struct {
	NopObserver
	mu               sync.Mutex
	waited, sentBack int
}

func (w *limitWaits) Attempt(_, class string) {
	if class == ClassLimited {
		w.mu.Lock()
		w.sentBack++
		w.mu.Unlock()
	}
}

func (w *limitWaits) LimitWaited(string, string, time.Duration) {
	w.mu.Lock()
	w.waited++
	w.mu.Unlock()
}

func (w *limitWaits) LimitHeld(string, int) {}

func (w *limitWaits) counts() (waited, sentBack int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waited, w.sentBack
}

// TestLimitedDeliveryIsNotAnAttempt sends a job to a full limit: it is
// refused before its attempt, with a limited row in the ledger, the exact
// wait of the rate, and nothing sent; once the budget allows, it runs.
func TestLimitedDeliveryIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := &partner{hold: func(int) time.Duration { return 0 }}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	use := limitUse(t, job.FlowLimit{Name: "ship-api", Rate: 1, Period: time.Minute}, "{account}")
	deps := e.deps(nil, 5*time.Second)
	mux, err := NewHandlers().Mux(deps, []*job.Spec{partnerSpec(t, srv.URL, use)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mux.ProcessTask(t.Context(), partnerTask("acme", "o-1")); err != nil {
		t.Fatalf("the first job, within the budget: %v", err)
	}
	err = mux.ProcessTask(t.Context(), partnerTask("globex", "o-2"))
	limited, ok := errors.AsType[*LimitedError](err)
	if !ok {
		t.Fatalf("the second job for the same account: %v, want a *LimitedError", err)
	}
	if limited.Limit != "ship-api" || limited.Value != "acct-1" || limited.Reason != flowlimit.ReasonRate ||
		limited.After <= 58*time.Second || limited.After > time.Minute+50*time.Millisecond {
		t.Errorf("LimitedError = %+v; want ship-api/acct-1's rate, a wait just under a minute and its 50ms", limited)
	}
	if IsFailure(err) {
		t.Error("IsFailure(limited) = true; a limit is not a failure of the job")
	}
	if d := RetryDelay(3, err, nil); d != limited.After {
		t.Errorf("RetryDelay = %s, want the rate's exact wait %s", d, limited.After)
	}
	if p.calls() != 1 {
		t.Errorf("the partner got %d calls; the limited job must not reach it", p.calls())
	}
	if _, err := e.store.Get(t.Context(), "globex", "ship:o-2"); !errors.Is(err, execution.ErrNotFound) {
		t.Errorf("the limited job has execution state (%v); no attempt should have started", err)
	}
	entries, err := execution.Attempts(t.Context(), e.pool, "globex", "ship:o-2")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Outcome != execution.OutcomeLimited || entries[0].Attempt != 0 || entries[0].FencingToken != 0 {
		t.Fatalf("ledger = %+v; want one limited row, no attempt, no token", entries)
	}
	// The lock was given back: another job on the same resource is not
	// refused as busy.
	if held, _ := e.rdb.Exists(t.Context(), e.lockKey("o-2")).Result(); held != 0 {
		t.Error("the limited delivery kept its resource lock")
	}
}

// TestLimitsAreReleasedAfterTheAttempt checks that a slot is given back
// however the attempt ends, and that a replay takes none.
func TestLimitsAreReleasedAfterTheAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	answer := http.StatusInternalServerError
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(answer)
	}))
	t.Cleanup(srv.Close)
	use := limitUse(t, job.FlowLimit{Name: "ship-api", Concurrency: 1}, "{tenant}")
	mux, err := NewHandlers().Mux(e.deps(nil, 5*time.Second), []*job.Spec{partnerSpec(t, srv.URL, use)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	slots, _ := flowlimit.New(e.rdb, flowlimit.Options{Prefix: e.prefix}).Keys("ship-api", "acme")
	held := func() int64 { n, _ := e.rdb.ZCard(t.Context(), slots).Result(); return n }

	if err := mux.ProcessTask(t.Context(), partnerTask("acme", "o-1")); err == nil || !IsFailure(err) {
		t.Fatalf("a 500: %v, want a failed attempt", err)
	}
	if n := held(); n != 0 {
		t.Fatalf("%d slots held after a failed attempt, want 0", n)
	}
	mu.Lock()
	answer = http.StatusOK
	mu.Unlock()
	if err := mux.ProcessTask(t.Context(), partnerTask("acme", "o-1")); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 0 {
		t.Fatalf("%d slots held after a success, want 0", n)
	}
	// A slot held elsewhere does not stop a replay: it never takes one.
	other := flowlimit.New(e.rdb, flowlimit.Options{Prefix: e.prefix})
	if _, err := other.Take(t.Context(), "elsewhere", time.Minute, []flowlimit.Rule{{Name: "ship-api", Value: "acme", Concurrency: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := mux.ProcessTask(t.Context(), partnerTask("acme", "o-1")); err != nil {
		t.Fatalf("a replay under a full limit: %v, want acked", err)
	}
}

// limitsUnreachable is a hook under which a client's pipelines that carry
// a limit's keys fail as if Redis were down, while its other commands,
// the lock's among them, reach Redis.
type limitsUnreachable struct{}

func (limitsUnreachable) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (limitsUnreachable) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (limitsUnreachable) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, namesALimit) {
			return next(ctx, cmds)
		}
		err := errors.New("dial tcp: connect: connection refused")
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// namesALimit reports whether c names a key of a limit's.
func namesALimit(c redis.Cmder) bool {
	return slices.ContainsFunc(c.Args(), func(a any) bool {
		s, ok := a.(string)
		return ok && strings.Contains(s, ":limit:{")
	})
}

// TestLimitsUnreachableIsTransient: when the limits cannot be asked, the
// attempt does not start (it would run unlimited) and is retried as a
// transient error before the attempt.
func TestLimitsUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := &partner{hold: func(int) time.Duration { return 0 }}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	limitsDown := redis.NewClient(e.rdb.Options())
	t.Cleanup(func() { _ = limitsDown.Close() })
	limitsDown.AddHook(limitsUnreachable{})
	deps := e.deps(nil, 5*time.Second)
	deps.Redis = limitsDown
	use := limitUse(t, job.FlowLimit{Name: "ship-api", Concurrency: 1}, "{tenant}")
	mux, err := NewHandlers().Mux(deps, []*job.Spec{partnerSpec(t, srv.URL, use)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	err = mux.ProcessTask(t.Context(), partnerTask("acme", "o-1"))
	if err == nil || !IsFailure(err) || IsPermanent(err) || !strings.Contains(err.Error(), "take limits") {
		t.Fatalf("limits unreachable: %v; want a transient error", err)
	}
	if p.calls() != 0 {
		t.Errorf("the partner got %d calls; a job must not run unlimited", p.calls())
	}
	if _, err := e.store.Get(t.Context(), "acme", "ship:o-1"); !errors.Is(err, execution.ErrNotFound) {
		t.Errorf("an attempt was counted (%v)", err)
	}
}

// TestLimitSlotRenewsWithTheLock runs a job three lock TTLs long: its slot,
// leased for one TTL, is renewed with the lock and never lapses, and is
// given back when the job ends.
func TestLimitSlotRenewsWithTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 600 * time.Millisecond
	spec := partnerSpec(t, "http://unused.invalid", limitUse(t, job.FlowLimit{Name: "ship-api", Concurrency: 1}, "{tenant}"))
	spec.HTTP = nil
	reader := flowlimit.New(e.rdb, flowlimit.Options{Prefix: e.prefix})
	holders := func() int {
		u, err := reader.Busiest(t.Context(), "ship-api", 1)
		if err != nil {
			t.Error(err)
		}
		if len(u) == 0 {
			return 0
		}
		return len(u[0].Holders)
	}
	var lapsed int
	hs := NewHandlers()
	Add(hs, kind, func(ctx context.Context, j Job[json.RawMessage]) (string, error) {
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			if holders() != 1 {
				lapsed++
			}
			time.Sleep(ttl / 10)
		}
		return "done", nil
	})
	mux, err := hs.Mux(e.deps(nil, ttl), []*job.Spec{spec}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mux.ProcessTask(t.Context(), partnerTask("acme", "o-1")); err != nil {
		t.Fatal(err)
	}
	if lapsed > 0 {
		t.Errorf("the slot lapsed %d times while its job ran", lapsed)
	}
	if n := holders(); n != 0 {
		t.Errorf("%d slots held after the job, want 0", n)
	}
}

// TestLimitedDeliveryWaitsInPlace: a wait shorter than Deps.LimitWait is
// waited out by the worker, and the job runs without going back to the
// queue.
func TestLimitedDeliveryWaitsInPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := &partner{hold: func(int) time.Duration { return 0 }}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	use := limitUse(t, job.FlowLimit{Name: "ship-api", Rate: 4, Period: time.Second}, "{tenant}")
	waits := &limitWaits{}
	mux, err := NewHandlers().Mux(e.deps(waits, 5*time.Second), []*job.Spec{partnerSpec(t, srv.URL, use)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"o-1", "o-2"} {
		if err := mux.ProcessTask(t.Context(), partnerTask("acme", id)); err != nil {
			t.Fatalf("%s: %v; the second waits 250ms for the rate, within the 1s bound", id, err)
		}
	}
	p.mu.Lock()
	gap := p.starts[1].Sub(p.starts[0])
	p.mu.Unlock()
	if gap < 100*time.Millisecond {
		t.Errorf("the partner saw the two calls %s apart; the rate allows one every 250ms", gap)
	}
	if waited, sentBack := waits.counts(); waited != 1 || sentBack != 0 {
		t.Errorf("waited %d, sent back %d; want one wait in place", waited, sentBack)
	}
	if entries, _ := execution.Attempts(t.Context(), e.pool, "acme", "ship:o-2"); len(entries) != 1 || entries[0].Outcome != execution.OutcomeSucceeded {
		t.Errorf("ledger of the second job = %+v; want its one attempt, no limited row", entries)
	}
}
