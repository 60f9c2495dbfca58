package console

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/idemgate/idemgate/job"
)

// bulkCancelExplains is what the confirmation of a cancel by filter says
// it does.
const bulkCancelExplains = "Cancel stops each job, as a single cancel, `idemgate jobs cancel` and POST /admin/jobs/cancel do: a job waiting for a worker (scheduled, queued, retrying) becomes cancelled at once and its task is deleted from the queue; a job whose attempt is in flight becomes cancelling, and the attempt's end decides between succeeded and cancelled. Each job's final-status callback is sent as for a single cancel. Jobs that have already finished are not touched."

// bulkCancelTargets reads the job list's filters and counts the jobs a
// cancel would act on; it renders the error page and reports false when
// it cannot.
func (c *console) bulkCancelTargets(w http.ResponseWriter, r *http.Request) (job.ListFilter, url.Values, int, bool) {
	if c.opts.Jobs == nil || c.opts.Cancel == nil {
		c.fail(w, r, http.StatusConflict, "Cancelling jobs needs PostgreSQL and the queue: this gateway has no database_url or redis_url.")
		return job.ListFilter{}, nil, 0, false
	}
	p, err := jobsFilter(r.URL.Query())
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return job.ListFilter{}, nil, 0, false
	}
	n, err := c.opts.Cancel.CountCancellable(r.Context(), p.Filter, job.MaxBulkCount)
	if err != nil {
		c.storeFailed(w, r, "counting jobs", err)
		return job.ListFilter{}, nil, 0, false
	}
	return p.Filter, filtersOf(r.URL.Query()), n, true
}

func (c *console) jobsURL(q url.Values) string {
	u := c.opts.Prefix + "/jobs"
	if e := q.Encode(); e != "" {
		u += "?" + e
	}
	return u
}

func (c *console) handleBulkCancelConfirm(w http.ResponseWriter, r *http.Request) {
	_, q, n, ok := c.bulkCancelTargets(w, r)
	if !ok {
		return
	}
	if n == 0 {
		c.fail(w, r, http.StatusConflict, "No job that can be cancelled (scheduled, queued, processing or retrying) matches these filters.")
		return
	}
	count := min(n, c.bound())
	filterText := "every job"
	if e := q.Encode(); e != "" {
		filterText = e
	}
	c.render(w, r, http.StatusOK, "bulk", "Cancel matching jobs", page{Data: bulkView{
		Noun: "job", Label: "Cancel", Button: "Cancel " + strconv.Itoa(count) + " job" + plural(count), Explains: bulkCancelExplains,
		FilterText: filterText, Newest: true, Back: c.jobsURL(q), Count: count, Remaining: n - count, Bound: c.bound(),
		RemainingCapped: n >= job.MaxBulkCount}})
}

func (c *console) handleBulkCancel(w http.ResponseWriter, r *http.Request) {
	reason, ok := c.reason(w, r)
	if !ok {
		return
	}
	f, q, _, ok := c.bulkCancelTargets(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	done, err := c.opts.Cancel.CancelMatching(ctx, f, c.bound())
	if len(done) > 0 {
		targets := make([]job.Action, len(done))
		for i, rec := range done {
			targets[i] = job.Action{Tenant: rec.Tenant, JobID: rec.ID}
		}
		c.record(r, job.Action{Action: "bulk-cancel", Filter: q.Encode(), Reason: reason}, targets...)
	}
	if err != nil {
		c.opts.Logger.WarnContext(ctx, "console: bulk cancel stopped", "done", len(done), "err", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The cancel stopped after "+strconv.Itoa(len(done))+" job"+plural(len(done))+": a store could not be reached. Look at the jobs again and retry.")
		return
	}
	q.Set("done", "bulk-cancel")
	q.Set("n", strconv.Itoa(len(done)))
	http.Redirect(w, r, c.jobsURL(q), http.StatusSeeOther)
}
