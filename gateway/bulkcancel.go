package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// BulkCanceller cancels the jobs a filter matches: a *job.Submitter is
// one. The gateway serves POST /admin/jobs/cancel when its Options.Jobs
// is also a BulkCanceller.
type BulkCanceller interface {
	CancelMatching(ctx context.Context, f job.ListFilter, limit int) ([]job.Row, error)
	CountCancellable(ctx context.Context, f job.ListFilter, limit int) (int, error)
}

// handleAdminJobsCancel is POST /admin/jobs/cancel: an operator cancels
// the newest jobs a filter matches, at most job.MaxBulk, with an optional
// reason; the audit trail keeps one action with every job it cancelled.
func (g *Gateway) handleAdminJobsCancel() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := g.opts.Jobs.(BulkCanceller)
		if !ok {
			g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "this gateway has no enqueue routes"})
			return
		}
		q := r.URL.Query()
		var faults []problem.FieldFault
		for _, name := range []string{"limit", "cursor"} {
			if _, ok := q[name]; ok {
				faults = append(faults, problem.FieldFault{Field: name, Message: "a cancel by filter takes no " + name + "; it acts on the newest 1000 matching jobs at most"})
			}
		}
		q.Del("reason")
		q.Del("limit")
		q.Del("cursor")
		f, _, err := parseJobList(q, true)
		var bad *problem.Error
		if errors.As(err, &bad) {
			faults = append(faults, bad.Fields...)
		}
		if len(faults) > 0 {
			g.problems.Write(w, r, listFaults(faults))
			return
		}
		reason, err := actionReason(r)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		ctx := r.Context()
		done, err := c.CancelMatching(ctx, f, job.MaxBulk)
		if len(done) > 0 {
			targets := make([]job.Action, len(done))
			for i, rec := range done {
				targets[i] = job.Action{Tenant: rec.Tenant, JobID: rec.ID}
			}
			_, _ = g.audit.Record(ctx, r, job.Action{Action: "bulk-cancel", Via: "api", Filter: filterString(q), Reason: reason}, targets...)
		}
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrQueueUnavailable,
				Detail: "the cancel stopped after " + strconv.Itoa(len(done)) + " jobs; send it again for the rest", RetryAfter: time.Second, Cause: err})
			return
		}
		left, err := c.CountCancellable(ctx, f, 1)
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrQueueUnavailable,
				Detail: "the jobs were cancelled but what is left could not be counted; send it again", RetryAfter: time.Second, Cause: err})
			return
		}
		doc := openapi.BulkCancel{JobIds: make([]string, len(done)), More: left > 0}
		for i, rec := range done {
			doc.JobIds[i] = rec.ID
			if rec.Status == job.StatusCancelling {
				doc.Cancelling++
			} else {
				doc.Cancelled++
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, doc)
	}
}

// filterString is a job list's filters as the audit trail keeps them.
func filterString(q url.Values) string {
	out := url.Values{}
	for _, k := range []string{"tenant", "status", "task", "created_after", "created_before"} {
		if v := q.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out.Encode()
}
