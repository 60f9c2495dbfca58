package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
)

// maxFailedGroups is how many groups of failed jobs the page lists.
const maxFailedGroups = 50

// failedPage is the failed jobs: their groups by task and error, and the
// jobs one filter matches.
type failedPage struct {
	Scan, Bound          int
	NoJobs               string
	Groups               []failedGroup
	Filter               job.FailedFilter
	Since, Until         string
	Jobs                 []job.Row
	CountText            string
	CanReplay, CanDelete bool
	ReplayURL, DeleteURL string
}

type failedGroup struct {
	job.FailedGroup
	URL string
}

// failedFilter reads the filter of the failed jobs from the query: task,
// error, and since and until as RFC 3339 times.
func failedFilter(q url.Values) (job.FailedFilter, error) {
	f := job.FailedFilter{Task: q.Get("task"), Error: q.Get("error")}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, errors.New(p.name + " is a time such as 2026-01-02T15:04:05Z, not " + v + ".")
		}
		*p.to = t
	}
	return f, nil
}

// query is the filter as the console's addresses carry it.
func filterQuery(f job.FailedFilter) url.Values {
	q := url.Values{}
	if f.Task != "" {
		q.Set("task", f.Task)
	}
	if f.Error != "" {
		q.Set("error", f.Error)
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339))
	}
	return q
}

func (c *console) failedURL(f job.FailedFilter, suffix string) string {
	u := c.opts.Prefix + "/failed" + suffix
	if q := filterQuery(f).Encode(); q != "" {
		u += "?" + q
	}
	return u
}

func (c *console) bound() int {
	if c.opts.MaxBulk > 0 {
		return c.opts.MaxBulk
	}
	return job.MaxBulk
}

func (c *console) handleFailed(w http.ResponseWriter, r *http.Request) {
	f, err := failedFilter(r.URL.Query())
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	p := failedPage{Scan: job.FailedScan, Bound: c.bound(), Filter: f, Since: r.URL.Query().Get("since"), Until: r.URL.Query().Get("until")}
	if c.opts.Jobs == nil {
		p.NoJobs = "Jobs are kept in PostgreSQL, and this gateway has no database_url."
		c.render(w, r, http.StatusOK, "failed", "Failed jobs", page{Data: p, Flash: flashOf(r)})
		return
	}
	ctx := r.Context()
	groups, err := c.opts.Jobs.FailedGroups(ctx, maxFailedGroups)
	if err != nil {
		c.storeFailed(w, r, "grouping failed jobs", err)
		return
	}
	for _, g := range groups {
		p.Groups = append(p.Groups, failedGroup{FailedGroup: g, URL: c.failedURL(job.FailedFilter{Task: g.Task, Error: g.Error}, "")})
	}
	if p.Jobs, err = c.opts.Jobs.FailedMatching(ctx, f, pageSize); err != nil {
		c.storeFailed(w, r, "listing failed jobs", err)
		return
	}
	n, err := c.opts.Jobs.CountFailed(ctx, f, job.FailedScan)
	if err != nil {
		c.storeFailed(w, r, "counting failed jobs", err)
		return
	}
	p.CountText = countText(n, job.FailedScan) + " failed job" + plural(n) + " match" + map[bool]string{true: "es", false: ""}[n == 1] + "; the newest " + strconv.Itoa(min(n, pageSize)) + " are shown."
	p.CanReplay = c.opts.DeadLetters != nil && n > 0
	p.CanDelete = c.opts.DeadLetters != nil && n > 0
	p.ReplayURL, p.DeleteURL = c.failedURL(f, "/replay"), c.failedURL(f, "/delete")
	c.render(w, r, http.StatusOK, "failed", "Failed jobs", page{Data: p, Flash: flashOf(r)})
}

func countText(n, capped int) string {
	if n >= capped {
		return strconv.Itoa(capped) + "+"
	}
	return strconv.Itoa(n)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// bulkView is the confirmation of a bulk action.
type bulkView struct {
	// Noun is what the action acts on, singular ("failed job").
	Noun                                      string
	Label, Button, Explains, FilterText, Back string
	// Newest says the action takes the newest jobs first.
	Newest                  bool
	Count, Remaining, Bound int
	RemainingCapped         bool
}

// bulkActions are the actions on the failed jobs a filter matches.
var bulkActions = map[string]struct{ Label, Explains string }{
	"replay": {"Replay", "Replay runs each failed job again through its record, as a single replay and `idemgate dlq replay` do: its archived task goes back to pending in the queue (or a new task with the same id is enqueued from the recorded payload), and its record goes back to queued. Workers then run it; the fencing token keeps an effect from happening twice."},
	"delete": {"Delete", "Delete removes each failed job, as a single delete and `idemgate dlq delete` do: its archived task from the queue and its record from the jobs table. The attempt ledger and the execution of its business key stay; the idempotency record of its request is not touched."},
}

// bulkTargets reads the filter and the jobs it matches, at most the bound,
// and how many more match.
func (c *console) bulkTargets(w http.ResponseWriter, r *http.Request) (string, job.FailedFilter, []job.Row, int, bool) {
	name := gateway.PathParam(r, "action")
	if _, ok := bulkActions[name]; !ok {
		c.fail(w, r, http.StatusNotFound, "No such action on failed jobs.")
		return "", job.FailedFilter{}, nil, 0, false
	}
	if c.opts.Jobs == nil || c.opts.DeadLetters == nil {
		c.fail(w, r, http.StatusConflict, "Acting on failed jobs needs PostgreSQL and the queue: this gateway has no database_url or redis_url.")
		return "", job.FailedFilter{}, nil, 0, false
	}
	f, err := failedFilter(r.URL.Query())
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return "", job.FailedFilter{}, nil, 0, false
	}
	ctx := r.Context()
	jobs, err := c.opts.Jobs.FailedMatching(ctx, f, c.bound())
	if err != nil {
		c.storeFailed(w, r, "listing failed jobs", err)
		return "", job.FailedFilter{}, nil, 0, false
	}
	n, err := c.opts.Jobs.CountFailed(ctx, f, job.FailedScan)
	if err != nil {
		c.storeFailed(w, r, "counting failed jobs", err)
		return "", job.FailedFilter{}, nil, 0, false
	}
	return name, f, jobs, max(n-len(jobs), 0), true
}

func (c *console) handleBulkConfirm(w http.ResponseWriter, r *http.Request) {
	name, f, jobs, remaining, ok := c.bulkTargets(w, r)
	if !ok {
		return
	}
	if len(jobs) == 0 {
		c.fail(w, r, http.StatusConflict, "No failed job matches this filter.")
		return
	}
	a := bulkActions[name]
	filterText := "every failed job"
	if q := filterQuery(f).Encode(); q != "" {
		filterText = q
	}
	c.render(w, r, http.StatusOK, "bulk", a.Label+" failed jobs", page{Data: bulkView{
		Noun: "failed job", Label: a.Label, Button: a.Label + " " + strconv.Itoa(len(jobs)) + " job" + plural(len(jobs)), Explains: a.Explains,
		FilterText: filterText, Back: c.failedURL(f, ""), Count: len(jobs), Remaining: remaining, Bound: c.bound(),
		RemainingCapped: remaining+len(jobs) >= job.FailedScan}})
}

func (c *console) handleBulkAction(w http.ResponseWriter, r *http.Request) {
	reason, ok := c.reason(w, r)
	if !ok {
		return
	}
	name, f, jobs, _, ok := c.bulkTargets(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var done []job.Action
	var failed error
	for _, j := range jobs {
		var err error
		switch name {
		case "replay":
			_, err = c.opts.DeadLetters.Replay(ctx, j.ID)
		case "delete":
			err = c.opts.DeadLetters.Delete(ctx, j.ID)
		}
		switch {
		case errors.Is(err, job.ErrNotFound), errors.Is(err, job.ErrNotFailed):
			// Replayed, deleted or run again meanwhile: not this action's.
			continue
		case err != nil:
			failed = err
		}
		if err != nil {
			break
		}
		done = append(done, job.Action{Tenant: j.Tenant, JobID: j.ID})
	}
	if len(done) > 0 {
		c.record(r, job.Action{Action: "bulk-" + name, Filter: f.String(), Reason: reason}, done...)
	}
	if failed != nil {
		c.opts.Logger.WarnContext(ctx, "console: bulk "+name+" stopped", "done", len(done), "err", failed)
		c.fail(w, r, http.StatusServiceUnavailable, "The "+name+" stopped after "+strconv.Itoa(len(done))+" job"+plural(len(done))+": a store could not be reached. Look at the failed jobs again and retry.")
		return
	}
	target := c.failedURL(f, "")
	sep := "?"
	if len(filterQuery(f)) > 0 {
		sep = "&"
	}
	http.Redirect(w, r, target+sep+"done=bulk-"+name+"&n="+strconv.Itoa(len(done)), http.StatusSeeOther)
}
