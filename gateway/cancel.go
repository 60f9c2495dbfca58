package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// ErrJobNotCancellable refuses the cancel of a job that has already
// succeeded or failed (409 job-not-cancellable).
var ErrJobNotCancellable = errors.New("job not cancellable")

// Canceller is what the cancel endpoints need: a *job.Submitter is one.
// The gateway serves them when its Options.Jobs is also a Canceller.
type Canceller interface {
	// Cancel and CancelByID return the job as the cancel left it, and
	// whether this cancel found an attempt in flight.
	Cancel(ctx context.Context, tenant, id string) (job.Row, bool, error)
	CancelByID(ctx context.Context, id string) (job.Row, bool, error)
}

// handleJobCancel is POST /v1/jobs/{id}/cancel: the tenant that created
// the job cancels it; another tenant gets 404, as for GET. It needs no
// Idempotency-Key: a cancel converges, so sending it again is safe.
func (g *Gateway) handleJobCancel() http.Handler {
	return g.tenantChain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		telemetry.SetEndpoint(r, "/v1/jobs/{id}/cancel")
		tenant := auth.Tenant(r.Context())
		g.cancelJob(w, r, chi.URLParam(r, "id"), func(c Canceller, id string) (job.Row, bool, error) {
			return c.Cancel(r.Context(), tenant, id)
		}, nil)
	}))
}

// handleAdminJobCancel is POST /admin/jobs/{id}/cancel: an operator
// cancels any tenant's job, with an optional reason (?reason= or a JSON
// body {"reason": "…"}) kept in the audit trail.
func (g *Gateway) handleAdminJobCancel() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := url.PathUnescape(chi.URLParam(r, "id"))
		if err != nil {
			id = "\x00" // matches no job
		}
		reason, err := actionReason(r)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		g.cancelJob(w, r, id, func(c Canceller, id string) (job.Row, bool, error) {
			return c.CancelByID(r.Context(), id)
		}, func(rec job.Row) {
			_, _ = g.audit.Record(r.Context(), r, job.Action{Action: "cancel", Via: "api", Tenant: rec.Tenant, JobID: rec.ID, Reason: reason})
		})
	}
}

// cancelJob answers a cancel: 200 with the job document when the job is
// cancelled (now or before) or was already being cancelled (a cancel
// converges), 202 when this cancel found an attempt in flight
// (cancelling: its end decides), 409
// job-not-cancellable for a job that has succeeded or failed, 404 for no
// such job. audited, when not nil, records the cancel in the audit trail.
func (g *Gateway) cancelJob(w http.ResponseWriter, r *http.Request, id string, cancel func(Canceller, string) (job.Row, bool, error), audited func(job.Row)) {
	c, ok := g.opts.Jobs.(Canceller)
	if !ok {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "this gateway has no enqueue routes"})
		return
	}
	if !job.Storable(id) {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no such job"})
		return
	}
	rec, stopping, err := cancel(c, id)
	switch {
	case errors.Is(err, job.ErrNotCancellable):
		g.problems.Write(w, r, &problem.Error{Err: ErrJobNotCancellable,
			Detail: "the job has " + string(rec.Status) + "; only a job that has not finished can be cancelled"})
		return
	case errors.Is(err, job.ErrNotFound):
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "no such job"})
		return
	case err != nil:
		g.problems.Write(w, r, &problem.Error{Err: ErrQueueUnavailable,
			Detail: "the job could not be cancelled now; send the cancel again", RetryAfter: time.Second, Cause: err})
		return
	}
	infoFrom(r.Context()).job = rec.ID
	g.opts.Logger.InfoContext(r.Context(), "job cancel", "job_id", rec.ID, "tenant", rec.Tenant, "status", string(rec.Status))
	if audited != nil {
		audited(rec)
	}
	doc := jobDocument(rec)
	w.Header().Set("ETag", jobETag(doc))
	w.Header().Set("Cache-Control", "no-store")
	status := http.StatusOK
	if stopping {
		status = http.StatusAccepted
	}
	writeJSON(w, status, doc)
}
