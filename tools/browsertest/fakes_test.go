package browsertest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/examples/partnersim"
)

// The services idemgate talks to, in the test process: the partner the
// payment jobs charge, scripted per payment, and the upstream of the
// proxied routes.

// Payment ids name their script by prefix.
const (
	// livePayment: the first charge is answered 503, the second 500, the
	// third is held until its caller goes away (the worker is killed
	// meanwhile), later ones reach the partner.
	livePayment = "live-"
	// deadPayment: the first charge is refused (402, a permanent refusal,
	// so the job is dead-lettered), later ones reach the partner.
	deadPayment = "dead-"
)

// xssBody is what the pages route answers: HTML that would set
// window.__pwned if a page rendered it.
const xssBody = `<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2"><b>bold</b>`

// partner is partnersim behind the scripts above. It counts, per payment
// id, the calls and the charges the simulator applied (an answer that was
// not a replay).
type partner struct {
	srv  *httptest.Server
	sim  *partnersim.Sim
	hung chan struct{} // closed when the live payment's third call arrives
	stop chan struct{} // closed when the test ends: releases a held call

	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
}

func newPartner(t *testing.T) *partner {
	p := &partner{
		sim:  partnersim.New(partnersim.Options{}),
		hung: make(chan struct{}), stop: make(chan struct{}),
		calls: map[string]int{}, applied: map[string]int{},
	}
	p.srv = httptest.NewServer(p)
	t.Cleanup(func() {
		close(p.stop)
		p.srv.Close()
	})
	return p
}

func (p *partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var pay struct {
		PaymentID string `json:"payment_id"`
	}
	_ = json.Unmarshal(body, &pay)
	p.mu.Lock()
	p.calls[pay.PaymentID]++
	n := p.calls[pay.PaymentID]
	p.mu.Unlock()

	switch {
	case strings.HasPrefix(pay.PaymentID, livePayment) && n == 1:
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	case strings.HasPrefix(pay.PaymentID, livePayment) && n == 2:
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	case strings.HasPrefix(pay.PaymentID, livePayment) && n == 3:
		close(p.hung)
		select {
		case <-r.Context().Done():
		case <-p.stop:
		}
		return
	case strings.HasPrefix(pay.PaymentID, deadPayment) && n == 1:
		http.Error(w, `{"error":"card declined"}`, http.StatusPaymentRequired)
		return
	}
	rec := &recorder{ResponseWriter: w}
	p.sim.ServeHTTP(rec, r)
	if rec.status == http.StatusCreated && w.Header().Get("Idempotent-Replayed") == "" {
		p.mu.Lock()
		p.applied[pay.PaymentID]++
		p.mu.Unlock()
	}
}

// charges is how many times the partner applied a charge for paymentID.
func (p *partner) charges(paymentID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[paymentID]
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// upstream serves the proxied routes: /v1/slow holds the first call of a
// key until its caller goes away and answers 201 after; /v1/pages answers
// xssBody as HTML.
type upstream struct {
	srv  *httptest.Server
	stop chan struct{}

	mu   sync.Mutex
	seen map[string]int // calls by Idempotency-Key
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{stop: make(chan struct{}), seen: map[string]int{}}
	u.srv = httptest.NewServer(u)
	t.Cleanup(func() {
		close(u.stop)
		u.srv.Close()
	})
	return u
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	u.mu.Lock()
	u.seen[key]++
	n := u.seen[key]
	u.mu.Unlock()
	switch r.URL.Path {
	case "/v1/slow":
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-u.stop:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"slow_1","state":"done"}`)
	case "/v1/pages":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, xssBody)
	default:
		http.NotFound(w, r)
	}
}

// calls is how many calls with an Idempotency-Key ending in key arrived
// (the gateway scopes the key it forwards by tenant).
func (u *upstream) calls(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for k, c := range u.seen {
		if strings.HasSuffix(k, key) {
			n += c
		}
	}
	return n
}
