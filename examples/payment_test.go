package examples

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers"
)

// A partner that fails 30% of calls before applying them and drops the
// answer of 30% of those it applies: retried as asynq would, every payment
// is charged exactly once and records that charge.
func TestPaymentChaos(t *testing.T) {
	t.Parallel()
	e := newBizEnv(t, partnersim.Options{FailRate: 0.3, DropRate: 0.3, Rand: seededRand(42)}, func(b *Business, d *workers.Deps) {
		b.Breaker.Failures = 1 << 20 // this test is about retries, not the breaker
		d.MaxAttempts = 1000
	})
	const payments = 20
	var retried int
	for i := range payments {
		// One after another, so the seeded partner fails the same calls
		// on every run.
		p := PaymentCharge{PaymentID: fmt.Sprintf("pay-%d", i), AmountCents: int64(100 + i), Currency: "EUR"}
		retried += len(untilAcked(t, e.mux, task(t, "acme", TaskPaymentCharge, p)))
		if err := e.deliver(t, task(t, "acme", TaskPaymentCharge, p)); err != nil {
			t.Fatalf("replay of %s: %v", p.PaymentID, err)
		}
	}
	if retried == 0 {
		t.Fatal("no delivery failed: the partner's chaos did not happen")
	}
	applied := e.sim.Applied()
	if len(applied) != payments {
		t.Fatalf("partner applied %d charges, want %d: %v", len(applied), payments, applied)
	}
	for id, n := range applied {
		if n != 1 {
			t.Errorf("charge %s applied %d times", id, n)
		}
	}
	for i := range payments {
		id := fmt.Sprintf("pay-%d", i)
		charges := strings1(t, e.pool, `SELECT partner_charge_id FROM payments WHERE payment_id = $1 AND status = 'succeeded'`, id)
		if len(charges) != 1 || applied[charges[0]] != 1 {
			t.Errorf("payment %s holds %q, want one charge the partner applied", id, charges)
			continue
		}
		if rec := e.exec(t, "acme", "payment:"+id); rec.ResultRef != charges[0] {
			t.Errorf("execution of %s has result %q, want %s", id, rec.ResultRef, charges[0])
		}
	}
	t.Logf("%d failed deliveries on the way; partner stats %+v", retried, e.sim.Stats())
}

// A partner down for longer than a payment has attempts: the payment
// waits instead of failing, every call carries the same Idempotency-Key,
// and once the partner is back it is charged exactly once, even though the
// first call that reached the recovered partner lost its answer.
func TestPaymentWaitsOutAPartnerOutage(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	// The partner's dice: 0 while it is down (FailRate: 503), then what
	// next holds, then 0.99 (no failure, no drop).
	var (
		mu   sync.Mutex
		down = true
		next []float64
	)
	dice := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case down:
			return 0
		case len(next) > 0:
			v := next[0]
			next = next[1:]
			return v
		}
		return 0.99
	}
	e := newBizEnv(t, partnersim.Options{FailRate: 0.5, DropRate: 0.5, Rand: dice}, func(b *Business, d *workers.Deps) {
		// net/http resends a request with an Idempotency-Key by itself
		// when a reused connection dies before the answer, which would
		// hide the lost answer this test is about.
		b.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		b.Breaker = BreakerConfig{Failures: 3, CoolDown: time.Minute}
		b.Now = clock.Now
		d.MaxAttempts = 2
	})
	p := PaymentCharge{PaymentID: "pay-outage", AmountCents: 4200, Currency: "EUR"}
	tk := task(t, "acme", TaskPaymentCharge, p)
	waits := func(step string, open bool) {
		t.Helper()
		err := e.deliver(t, tk)
		if err == nil || errors.Is(err, asynq.SkipRetry) || workers.IsPermanent(err) || !workers.IsUnavailable(err) {
			t.Fatalf("%s: %v, want the partner unavailable, retried", step, err)
		}
		if errors.Is(err, ErrCircuitOpen) != open {
			t.Fatalf("%s: %v; circuit open = %v, want %v", step, err, errors.Is(err, ErrCircuitOpen), open)
		}
		if rec := e.exec(t, "acme", "payment:pay-outage"); rec.Status != "processing" || rec.Attempts != 0 {
			t.Fatalf("%s: execution = %+v, want processing with no attempt counted", step, rec)
		}
	}

	// Three 503s open the circuit; then the calls stop reaching the
	// partner. Eight deliveries in all, four times the job's attempts.
	for i := range 3 {
		waits(fmt.Sprintf("503 #%d", i+1), false)
	}
	for i := range 5 {
		waits(fmt.Sprintf("circuit open #%d", i+1), true)
	}
	if got := e.sim.Stats().Requests; got != 3 {
		t.Fatalf("partner got %d requests while down, want 3 (the circuit opened)", got)
	}

	// The partner is back, but the probe's answer is lost after it applied
	// the charge: ambiguous, still not an attempt.
	mu.Lock()
	down, next = false, []float64{0.99, 0} // no 503, then drop the answer
	mu.Unlock()
	clock.Add(time.Minute)
	waits("the charge applied, its answer lost", false)
	waits("circuit open again", true)
	if applied := e.sim.Applied(); len(applied) != 1 {
		t.Fatalf("partner applied %v, want one charge", applied)
	}

	// The next probe repeats the key and gets the first charge.
	clock.Add(time.Minute)
	if err := e.deliver(t, tk); err != nil {
		t.Fatalf("delivery once the partner answers: %v", err)
	}
	applied := e.sim.Applied()
	if len(applied) != 1 {
		t.Fatalf("partner applied %v, want one charge", applied)
	}
	var charge string
	for id, n := range applied {
		if n != 1 {
			t.Fatalf("charge %s applied %d times", id, n)
		}
		charge = id
	}
	rec := e.exec(t, "acme", "payment:pay-outage")
	if rec.Status != "succeeded" || rec.Attempts != 1 || rec.ResultRef != charge {
		t.Fatalf("execution = %+v, want succeeded after 1 real attempt with %s", rec, charge)
	}
	if st := strings1(t, e.pool, `SELECT status || ' ' || partner_charge_id FROM payments WHERE tenant = 'acme' AND payment_id = 'pay-outage'`); len(st) != 1 || st[0] != "succeeded "+charge {
		t.Fatalf("payment = %q, want succeeded with %s", st, charge)
	}
	if keys := e.keys.distinct(); len(keys) != 1 || keys[0] != "acme/payment:pay-outage" {
		t.Fatalf("Idempotency-Keys sent = %q, want one, the payment's", keys)
	}
	// A later duplicate is a replay.
	if err := e.deliver(t, tk); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if got := e.sim.Stats().Applied; got != 1 {
		t.Fatalf("partner applied %d charges in all, want 1", got)
	}
}

// scriptedPartner answers /charges with whatever answer returns, and counts
// the calls that reach it.
type scriptedPartner struct {
	calls  atomic.Int64
	mu     sync.Mutex
	answer func(w http.ResponseWriter, r *http.Request)
}

func (s *scriptedPartner) set(answer func(w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	s.answer = answer
	s.mu.Unlock()
}

func (s *scriptedPartner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.calls.Add(1)
	s.mu.Lock()
	answer := s.answer
	s.mu.Unlock()
	answer(w, r)
}

func answerWith(status int, body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// newScriptedEnv is a bizEnv whose partner is scripted.
func newScriptedEnv(t *testing.T, adjust func(*Business, *workers.Deps)) (*bizEnv, *scriptedPartner) {
	t.Helper()
	sp := &scriptedPartner{answer: answerWith(http.StatusCreated, `{"id":"ch_ok"}`)}
	srv := httptest.NewServer(sp)
	t.Cleanup(srv.Close)
	e := newBizEnv(t, partnersim.Options{}, func(b *Business, d *workers.Deps) {
		b.PartnerURL = srv.URL
		if adjust != nil {
			adjust(b, d)
		}
	})
	return e, sp
}

func TestPaymentPartnerRefusalIsPermanent(t *testing.T) {
	t.Parallel()
	e, sp := newScriptedEnv(t, nil)
	sp.set(answerWith(http.StatusBadRequest, `{"error":"card declined"}`))
	tk := task(t, "acme", TaskPaymentCharge, PaymentCharge{PaymentID: "pay-x", AmountCents: 100, Currency: "EUR"})

	err := e.deliver(t, tk)
	var (
		perm *workers.PermanentError
		perr *PartnerError
	)
	if !errors.As(err, &perm) || !errors.Is(err, asynq.SkipRetry) || !errors.As(err, &perr) || perr.Status != http.StatusBadRequest {
		t.Fatalf("partner 400: %v, want a permanent *PartnerError and SkipRetry", err)
	}
	if rec := e.exec(t, "acme", "payment:pay-x"); rec.Status != "failed" || rec.Attempts != 1 {
		t.Fatalf("execution = %+v, want failed after one attempt", rec)
	}
	var status, lastErr string
	if err := e.pool.QueryRow(t.Context(), `SELECT status, coalesce(last_error, '') FROM payments WHERE tenant = 'acme' AND payment_id = 'pay-x'`).Scan(&status, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(lastErr, "card declined") {
		t.Fatalf("payment is %s (%q), want failed with the partner's answer", status, lastErr)
	}

	// A replay from the dead-letter queue, once the cause is fixed, charges.
	sp.set(answerWith(http.StatusCreated, `{"id":"ch_later"}`))
	if err := e.deliver(t, tk); err != nil {
		t.Fatalf("replay from the DLQ: %v", err)
	}
	if st := strings1(t, e.pool, `SELECT status || ' ' || partner_charge_id FROM payments WHERE payment_id = 'pay-x'`); len(st) != 1 || st[0] != "succeeded ch_later" {
		t.Fatalf("payment after the replay = %q", st)
	}
}

// newFakeClock is a clock tests move by hand.
func newFakeClock() *testkit.Clock {
	return testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// While the partner keeps failing, the breaker opens after Failures calls
// in a row and the calls stop reaching it; after the cool-down one probe
// goes through, and a successful one closes the circuit.
func TestPaymentBreaker(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	e, sp := newScriptedEnv(t, func(b *Business, d *workers.Deps) {
		b.Breaker = BreakerConfig{Failures: 3, CoolDown: time.Minute}
		b.Now = clock.Now
		d.MaxAttempts = 100
	})
	sp.set(answerWith(http.StatusServiceUnavailable, `{"error":"down"}`))
	deliver := func(id string) error {
		return e.deliver(t, task(t, "acme", TaskPaymentCharge, PaymentCharge{PaymentID: id, AmountCents: 100, Currency: "EUR"}))
	}
	steps := []struct {
		name      string
		before    func()
		payment   string
		open      bool  // the delivery must fail with ErrCircuitOpen
		ok        bool  // the delivery must succeed
		wantCalls int64 // calls that reached the partner so far
	}{
		{name: "failure 1", payment: "p1", wantCalls: 1},
		{name: "failure 2", payment: "p2", wantCalls: 2},
		{name: "failure 3 opens", payment: "p1", wantCalls: 3},
		{name: "open: not called", payment: "p2", open: true, wantCalls: 3},
		{name: "still open just before the cool-down", before: func() { clock.Add(59 * time.Second) }, payment: "p3", open: true, wantCalls: 3},
		{name: "half-open probe fails", before: func() { clock.Add(time.Second) }, payment: "p1", wantCalls: 4},
		{name: "open again", payment: "p1", open: true, wantCalls: 4},
		{
			name: "probe succeeds",
			before: func() {
				clock.Add(time.Minute)
				sp.set(answerWith(http.StatusCreated, `{"id":"ch_1"}`))
			},
			payment: "p1", ok: true, wantCalls: 5,
		},
		{name: "closed", before: func() { sp.set(answerWith(http.StatusCreated, `{"id":"ch_2"}`)) }, payment: "p2", ok: true, wantCalls: 6},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before()
			}
			err := deliver(st.payment)
			switch {
			case st.ok && err != nil:
				t.Fatalf("delivery: %v", err)
			case !st.ok && (err == nil || workers.IsPermanent(err)):
				t.Fatalf("delivery: %v, want a transient error", err)
			case !st.ok && errors.Is(err, ErrCircuitOpen) != st.open:
				t.Fatalf("delivery: %v; circuit open = %v, want %v", err, errors.Is(err, ErrCircuitOpen), st.open)
			case !st.ok && !workers.IsUnavailable(err):
				t.Fatalf("delivery: %v, want the partner unavailable", err)
			}
			if got := sp.calls.Load(); got != st.wantCalls {
				t.Fatalf("partner called %d times, want %d", got, st.wantCalls)
			}
		})
		if !ok {
			break
		}
	}
}

// TestPartnerAnswers classifies the partner's answers; it needs no
// database.
func TestPartnerAnswers(t *testing.T) {
	t.Parallel()
	hang := func(w http.ResponseWriter, r *http.Request) {
		// The server notices the client gave up only once it has read
		// the body.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
		}
	}
	drop := func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }
	tests := []struct {
		name        string
		answer      func(w http.ResponseWriter, r *http.Request) // nil: nobody listens
		wantID      string
		permanent   bool
		unavailable bool
		outcome     callOutcome
		is          error
	}{
		{name: "201 with an id", answer: answerWith(201, `{"id":"ch_1"}`), wantID: "ch_1", outcome: callSucceeded},
		{name: "200 replayed", answer: answerWith(200, `{"id":"ch_2","object":"charge"}`), wantID: "ch_2", outcome: callSucceeded},
		{name: "2xx without an id", answer: answerWith(201, `{}`), permanent: true, outcome: callSucceeded},
		{name: "2xx not JSON", answer: answerWith(201, `ok`), permanent: true, outcome: callSucceeded},
		{name: "400", answer: answerWith(400, `{"error":"bad"}`), permanent: true, outcome: callSucceeded},
		{name: "401", answer: answerWith(401, ``), permanent: true, outcome: callSucceeded},
		{name: "404", answer: answerWith(404, ``), permanent: true, outcome: callSucceeded},
		{name: "409", answer: answerWith(409, ``), permanent: true, outcome: callSucceeded},
		{name: "422 key reused", answer: answerWith(422, `{"error":"Idempotency-Key reused with another body"}`), permanent: true, outcome: callSucceeded},
		{name: "408", answer: answerWith(408, ``), unavailable: true, outcome: callFailed},
		{name: "425", answer: answerWith(425, ``), unavailable: true, outcome: callFailed},
		{name: "429", answer: answerWith(429, ``), unavailable: true, outcome: callFailed},
		{name: "500", answer: answerWith(500, ``), unavailable: true, outcome: callFailed},
		{name: "502", answer: answerWith(502, ``), unavailable: true, outcome: callFailed},
		{name: "503", answer: answerWith(503, ``), unavailable: true, outcome: callFailed},
		{name: "504", answer: answerWith(504, ``), unavailable: true, outcome: callFailed},
		{name: "timeout", answer: hang, unavailable: true, outcome: callFailed, is: context.DeadlineExceeded},
		{name: "connection dropped", answer: drop, unavailable: true, outcome: callFailed},
		{name: "connection refused", unavailable: true, outcome: callFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				gotKey  atomic.Value
				handler http.HandlerFunc
			)
			if tt.answer != nil {
				handler = func(w http.ResponseWriter, r *http.Request) {
					gotKey.Store(r.Header.Get("Idempotency-Key"))
					tt.answer(w, r)
				}
			}
			srv := httptest.NewServer(handler)
			t.Cleanup(srv.Close)
			if tt.answer == nil {
				srv.Close()
			}
			timeout := time.Minute // never reached but by the hanging partner
			if tt.is == context.DeadlineExceeded {
				timeout = 200 * time.Millisecond
			}
			p := newPartner(srv.URL+"/charges", Business{PartnerTimeout: timeout}.withDefaults())
			id, outcome, err := p.do(t.Context(), "acme/payment:7", []byte(`{"payment_id":"7"}`))
			if id != tt.wantID || outcome != tt.outcome || (err != nil) == (tt.wantID != "") || workers.IsPermanent(err) != tt.permanent {
				t.Fatalf("do = %q, outcome %v, %v; want %q, outcome %v, permanent %v", id, outcome, err, tt.wantID, tt.outcome, tt.permanent)
			}
			if workers.IsUnavailable(err) != tt.unavailable {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", err, workers.IsUnavailable(err), tt.unavailable)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v is not %v", err, tt.is)
			}
			if tt.answer != nil && gotKey.Load() != "acme/payment:7" {
				t.Fatalf("partner got Idempotency-Key %v", gotKey.Load())
			}
		})
	}
}

// A partner that refuses a request is up: refusals do not open the
// circuit, and a job that stopped on its own does not count either.
func TestBreakerCountsOnlyPartnerFailures(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := newBreaker(BreakerConfig{Failures: 2, CoolDown: time.Minute}, clock.Now)
	call := func(o callOutcome) error {
		done, err := b.allow()
		if err != nil {
			return err
		}
		done(o)
		return nil
	}
	steps := []struct {
		name    string
		outcome callOutcome
		refused bool // allow must refuse the call
	}{
		{name: "failure", outcome: callFailed},
		{name: "a refusal resets the count", outcome: callSucceeded},
		{name: "failure again", outcome: callFailed},
		{name: "our own cancellation does not count", outcome: callIgnored},
		{name: "second failure in a row opens", outcome: callFailed},
		{name: "open", refused: true},
	}
	for _, st := range steps {
		err := call(st.outcome)
		if errors.Is(err, ErrCircuitOpen) != st.refused {
			t.Fatalf("%s: allow = %v, want refused %v", st.name, err, st.refused)
		}
	}
	clock.Add(time.Minute)
	probe, err := b.allow()
	if err != nil {
		t.Fatalf("after the cool-down: %v, want a probe", err)
	}
	if _, err := b.allow(); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("a second call while the probe is out: %v, want ErrCircuitOpen", err)
	}
	probe(callIgnored)
	probe, err = b.allow()
	if err != nil {
		t.Fatalf("after a probe without a verdict: %v, want another probe at once", err)
	}
	probe(callSucceeded)
	for i := range 3 {
		if _, err := b.allow(); err != nil {
			t.Fatalf("call %d after a successful probe: %v", i, err)
		}
	}
}
