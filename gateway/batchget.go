package gateway

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// batchStateDocument is the answer of GET /v1/batches/{id}: the
// BatchState of openapi.yaml.
type batchStateDocument struct {
	BatchID   string    `json:"batch_id"`
	CreatedAt time.Time `json:"created_at"`
	// Items is how many items the batch held; Accepted how many of them
	// have a job, which Counts count by status.
	Items    int            `json:"items"`
	Accepted int            `json:"accepted"`
	Counts   map[string]int `json:"counts"`
	// Final: every accepted job is final.
	Final bool `json:"final"`
}

func batchState(st job.BatchState) batchStateDocument {
	doc := batchStateDocument{BatchID: st.ID, CreatedAt: st.CreatedAt.UTC(), Items: st.Items, Counts: map[string]int{}, Final: st.Final()}
	for s, n := range st.Counts {
		doc.Counts[string(s)] = n
		doc.Accepted += n
	}
	return doc
}

// Polling of a waiting GET /v1/batches/{id}: from the first delay,
// doubled after each read, up to the last.
const (
	batchPollFirst = 100 * time.Millisecond
	batchPollMax   = time.Second
)

// handleBatchGet shows a batch to the tenant that submitted it; another
// tenant gets 404, as if it did not exist. With ?wait= it holds until
// every accepted job is final, within the bounds of the job waits
// (jobs_api.max_wait, max_waiters, max_waiters_per_tenant).
func (g *Gateway) handleBatchGet() http.Handler {
	return g.tenantChain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		telemetry.SetEndpoint(r, "/v1/batches/{id}")
		bs, ok := g.opts.Jobs.(BatchSubmitter)
		if !ok {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "this gateway has no batch paths"})
			return
		}
		tenant, id := auth.Tenant(r.Context()), chi.URLParam(r, "id")
		jw, err := parseJobWait(r, g.opts.MaxWait)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		wait, release := g.admitBatchWait(w, tenant, jw.d)
		defer release()
		st, err := bs.Batch(r.Context(), tenant, id)
		if err != nil {
			if err == job.ErrNotFound {
				g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no such batch"})
				return
			}
			g.jobError(w, r, err)
			return
		}
		if wait > 0 && !st.Final() {
			st = g.awaitBatch(r, bs, tenant, st, wait)
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, batchState(st))
	}))
}

// admitBatchWait is admitWait for a batch: a wait within the bounds is
// counted until the returned func is called; one beyond them is answered
// at once, with HeaderWaitRefused.
func (g *Gateway) admitBatchWait(w http.ResponseWriter, tenant string, d time.Duration) (time.Duration, func()) {
	if d <= 0 || g.Draining() {
		return 0, func() {}
	}
	if refused := g.waiters.take(tenant); refused != "" {
		w.Header().Set(HeaderWaitRefused, refused)
		g.opts.Metrics.waitsRefused.WithLabelValues(refused).Inc()
		return 0, func() {}
	}
	g.opts.Metrics.waiters.Inc()
	return d, func() {
		g.opts.Metrics.waiters.Dec()
		g.waiters.give(tenant)
	}
}

// awaitBatch reads the batch again, less and less often, until its jobs
// are all final, the wait ends, the client goes away or the gateway
// starts draining, and returns the batch as last read. A read that fails
// ends the wait with the last good one.
func (g *Gateway) awaitBatch(r *http.Request, bs BatchSubmitter, tenant string, st job.BatchState, d time.Duration) job.BatchState {
	defer g.idle()()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	delay := batchPollFirst
	poll := time.NewTimer(delay)
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			next, err := bs.Batch(r.Context(), tenant, st.ID)
			if err != nil {
				return st
			}
			if st = next; st.Final() {
				return st
			}
			delay = min(2*delay, batchPollMax)
			poll.Reset(delay)
		case <-deadline.C:
			return st
		case <-g.drained:
			return st
		case <-r.Context().Done():
			return st
		}
	}
}
