package gateway

import (
	"net/http"
	"sync"
)

// DefaultMaxWaiters and DefaultMaxWaitersPerTenant bound the
// GET /v1/jobs/{id}?wait= one gateway holds at once, in all and for each
// tenant, unless Options.MaxWaiters and Options.MaxWaitersPerTenant say
// otherwise.
const (
	DefaultMaxWaiters          = 1024
	DefaultMaxWaitersPerTenant = 16
)

// HeaderWaitRefused is on the answer to a GET /v1/jobs/{id}?wait= that was
// answered at once, with the job as it stands, because the gateway
// already held as many waits as it may. Its value names the bound:
// max_waiters_per_tenant or max_waiters.
const HeaderWaitRefused = "Idemgate-Wait-Refused"

// The values of HeaderWaitRefused.
const (
	waitRefusedTenant = "max_waiters_per_tenant"
	waitRefusedAll    = "max_waiters"
)

// waiters counts the waits a gateway holds, in all and for each tenant.
//
// A held wait costs a goroutine, a connection and a watch, not an
// upstream call or a store call: it does not count against
// Options.MaxInFlight, which is meant for work (see awaitJob), and has
// this budget of its own instead. The bound per tenant keeps one tenant's
// waits from taking every slot of the others.
type waiters struct {
	all, perTenant int

	mu       sync.Mutex
	n        int
	byTenant map[string]int
}

func newWaiters(all, perTenant int) *waiters {
	return &waiters{all: all, perTenant: perTenant, byTenant: map[string]int{}}
}

// take counts one more wait of tenant, or returns the bound it would
// break (a HeaderWaitRefused value) without counting it.
func (ws *waiters) take(tenant string) (refused string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.byTenant[tenant] >= ws.perTenant:
		return waitRefusedTenant
	case ws.n >= ws.all:
		return waitRefusedAll
	}
	ws.n++
	ws.byTenant[tenant]++
	return ""
}

// give counts one wait of tenant fewer.
func (ws *waiters) give(tenant string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.n--
	if ws.byTenant[tenant]--; ws.byTenant[tenant] <= 0 {
		delete(ws.byTenant, tenant)
	}
}

// admitWait decides whether a GET /v1/jobs/{id} of tenant may wait. A wait
// within the bounds is counted until the returned func is called; one
// beyond them is answered at once, as without wait, with
// HeaderWaitRefused: a client that polls (both SDKs do when a gateway
// does not hold) then backs off and asks again, where a 429 would end its
// wait with an error after its retries.
func (g *Gateway) admitWait(w http.ResponseWriter, tenant string, jw jobWait) (jobWait, func()) {
	if jw.d <= 0 || g.opts.JobWatcher == nil || g.Draining() {
		return jw, func() {}
	}
	if refused := g.waiters.take(tenant); refused != "" {
		w.Header().Set(HeaderWaitRefused, refused)
		g.opts.Metrics.waitsRefused.WithLabelValues(refused).Inc()
		jw.d = 0
		return jw, func() {}
	}
	g.opts.Metrics.waiters.Inc()
	return jw, func() {
		g.opts.Metrics.waiters.Dec()
		g.waiters.give(tenant)
	}
}

// idle gives the request's slot of Options.MaxInFlight back while it
// waits, and returns the func that takes it again. Taking it again never
// sheds: the request is in hand, and what is left is to write its answer.
func (g *Gateway) idle() (resume func()) {
	g.inFlight.Add(-1)
	g.opts.Metrics.inFlight.Dec()
	return func() {
		g.inFlight.Add(1)
		g.opts.Metrics.inFlight.Inc()
	}
}
