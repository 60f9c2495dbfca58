package console

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
)

// jobsPage is the job list.
type jobsPage struct {
	Statuses []job.Status
	Filter   job.ListFilter
	// OlderThan is the filter as typed ("10m"); CreatedAfter and
	// CreatedBefore the time range as the form shows it.
	OlderThan                   string
	CreatedAfter, CreatedBefore string
	Jobs                        []job.Row
	Next                        string
	NoJobs                      string
	// Unreadable says PostgreSQL could not be read: the filters stay, the
	// list is not shown.
	Unreadable string
	// CancelURL confirms the cancel of the jobs the filters match; ""
	// when the console cannot cancel or none can match.
	CancelURL string
	Now       time.Time
}

// pageSize is how many jobs or keys a list shows at once.
const pageSize = 50

// jobsFilter reads the job list's filters from its query: status, task,
// tenant, older_than, created_after, created_before and after.
func jobsFilter(q url.Values) (jobsPage, error) {
	p := jobsPage{Statuses: job.Statuses(), OlderThan: q.Get("older_than")}
	p.Filter = job.ListFilter{Status: job.Status(q.Get("status")), Task: q.Get("task"), Tenant: q.Get("tenant"), After: job.Cursor(q.Get("after"))}
	if p.Filter.Status != "" && !validStatus(p.Filter.Status) {
		return p, errors.New("Unknown job status " + string(p.Filter.Status) + ".")
	}
	if p.OlderThan != "" {
		d, err := time.ParseDuration(p.OlderThan)
		if err != nil || d < 0 {
			return p, errors.New("older_than is a duration such as 10m or 2h, not " + p.OlderThan + ".")
		}
		p.Filter.OlderThan = d
	}
	for _, b := range []struct {
		name  string
		shown *string
		at    *time.Time
	}{{"created_after", &p.CreatedAfter, &p.Filter.CreatedAfter}, {"created_before", &p.CreatedBefore, &p.Filter.CreatedBefore}} {
		v := q.Get(b.name)
		if v == "" {
			continue
		}
		at, err := parseFormTime(v)
		if err != nil {
			return p, errors.New(b.name + " is a time such as 2026-01-02T15:04:05 (UTC) or RFC 3339, not " + v + ".")
		}
		*b.at, *b.shown = at, at.UTC().Format(formTime)
	}
	return p, nil
}

// jobsFilters are the query parameters of the job list's filters.
var jobsFilters = []string{"status", "task", "tenant", "older_than", "created_after", "created_before"}

// filtersOf is q's job list filters alone, without the page's cursor.
func filtersOf(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range jobsFilters {
		if v := q.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

func (c *console) handleJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := jobsFilter(q)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	p.Now = c.opts.Now()
	if c.opts.Jobs == nil {
		p.NoJobs = "Jobs are kept in PostgreSQL, and this gateway has no database_url."
		c.render(w, r, http.StatusOK, "jobs", "Jobs", page{Data: p, Flash: flashOf(r)})
		return
	}
	jobs, next, err := c.opts.Jobs.List(r.Context(), p.Filter, pageSize)
	switch {
	case errors.Is(err, job.ErrBadCursor):
		c.fail(w, r, http.StatusBadRequest, "The page cursor (after=) is not one this console made; start from the first page.")
		return
	case err != nil:
		c.opts.Logger.WarnContext(r.Context(), "console: listing jobs failed", "err", err)
		p.Unreadable = "PostgreSQL could not be read (listing jobs): no job is listed. Reload in a moment."
		c.render(w, r, http.StatusOK, "jobs", "Jobs", page{Data: p, Flash: flashOf(r)})
		return
	}
	p.Jobs = jobs
	if c.opts.Cancel != nil && len(jobs) > 0 && (p.Filter.Status == "" || p.Filter.Status.Runnable()) {
		p.CancelURL = c.opts.Prefix + "/jobs/cancel"
		if fq := filtersOf(q).Encode(); fq != "" {
			p.CancelURL += "?" + fq
		}
	}
	if next != "" {
		nq := filtersOf(q)
		nq.Set("after", string(next))
		p.Next = c.opts.Prefix + "/jobs?" + nq.Encode()
	}
	c.render(w, r, http.StatusOK, "jobs", "Jobs", page{Data: p, Flash: flashOf(r)})
}

// formTime is how a datetime-local input sends a time (read as UTC).
const formTime = "2006-01-02T15:04:05"

// parseFormTime reads a time from a filter: RFC 3339, or a form's
// datetime-local in UTC, with or without seconds.
func parseFormTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(formTime, v); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02T15:04", v)
}

func validStatus(s job.Status) bool {
	for _, v := range job.Statuses() {
		if v == s {
			return true
		}
	}
	return false
}

// jobView is the job page.
type jobView struct {
	Story    *explain.Story
	Document string
	// Payload is the stored payload, payload, as the page shows it. Only
	// handleJob renders it: the live check, polled every few seconds,
	// shows none of it.
	Payload bodyView
	payload []byte
	// Version changes whenever anything the page shows does.
	Version string
	Final   bool
	// The actions that apply.
	CanRequeue, CanReplay, CanDelete, CanCancel, CanRunNow, CanRerun bool
	KeyURL                                                           string
	// BatchURL is the page of the batch the job was submitted in; ""
	// when it was submitted alone.
	BatchURL string
	// ScheduleID and ScheduleURL name the schedule that fired the job;
	// "" when no schedule did.
	ScheduleID, ScheduleURL string
}

// jobStory reads everything the job page shows.
func (c *console) jobStory(r *http.Request, id string) (jobView, int, error) {
	story, err := c.opts.Stories.Job(r.Context(), id)
	switch {
	case errors.Is(err, explain.ErrNotFound):
		return jobView{}, http.StatusNotFound, err
	case err != nil:
		return jobView{}, http.StatusServiceUnavailable, err
	}
	v := jobView{Story: story}
	if c.opts.Jobs != nil {
		rec, err := c.opts.Jobs.ByID(r.Context(), id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			return jobView{}, http.StatusNotFound, explain.ErrNotFound
		case err != nil:
			return jobView{}, http.StatusServiceUnavailable, err
		}
		v.Document = pretty(gateway.JobDocument(rec))
		batch, err := c.opts.Jobs.BatchOf(r.Context(), id)
		if err != nil {
			return jobView{}, http.StatusServiceUnavailable, err
		}
		if batch != "" {
			v.BatchURL = c.batchURL(batch)
		}
		v.payload = rec.Payload
		if id, ok := job.ScheduleOf(rec); ok {
			v.ScheduleID, v.ScheduleURL = id, c.scheduleURL(rec.Tenant, id)
		}
	}
	st := job.Status(story.Job.Status)
	v.Final = st.Final()
	v.CanRequeue = c.opts.Requeue != nil && !st.Final()
	v.CanReplay = c.opts.DeadLetters != nil && st == job.StatusFailed
	v.CanDelete = c.opts.DeadLetters != nil && st == job.StatusFailed
	v.CanCancel = c.opts.Cancel != nil && st.Runnable()
	v.CanRunNow = c.opts.DeadLetters != nil && st == job.StatusRetrying
	v.CanRerun = c.opts.Rerun != nil && (st == job.StatusCancelled || st == job.StatusFailed)
	v.KeyURL = c.keyURL(scopeOfJob(story))
	v.Version = version(story)
	return v, http.StatusOK, nil
}

// version fingerprints what a page shows, for the live check.
func version(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func (c *console) handleJob(w http.ResponseWriter, r *http.Request) {
	id := gateway.PathParam(r, "id")
	v, status, err := c.jobStory(r, id)
	if err != nil {
		c.storyFailed(w, r, status, "job "+id, err)
		return
	}
	v.Payload = viewBody(v.payload, false)
	c.render(w, r, http.StatusOK, "job", "Job "+id, page{Data: v, Flash: flashOf(r), Live: c.jobURL(id) + "/live", Version: v.Version})
}

// storyFailed renders why a story could not be told.
func (c *console) storyFailed(w http.ResponseWriter, r *http.Request, status int, what string, err error) {
	if status == http.StatusNotFound {
		c.fail(w, r, status, "No "+what+" (or it was deleted).")
		return
	}
	c.opts.Logger.WarnContext(r.Context(), "console: reading "+what+" failed", "err", err)
	c.fail(w, r, http.StatusServiceUnavailable, "PostgreSQL or the idempotency store could not be read: "+what+" is not shown (its record, attempts and effects are kept there). Reload in a moment.")
}

// live is what a job or key page polls: it reloads its parts when Version
// changes.
type live struct {
	Version string `json:"version"`
	Status  string `json:"status"`
	Final   bool   `json:"final"`
}

func (c *console) handleJobLive(w http.ResponseWriter, r *http.Request) {
	v, status, err := c.jobStory(r, gateway.PathParam(r, "id"))
	if err != nil {
		writeLive(w, status, live{})
		return
	}
	writeLive(w, http.StatusOK, live{Version: v.Version, Status: string(v.Story.Job.Status), Final: v.Final})
}

func writeLive(w http.ResponseWriter, status int, l live) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(l)
}

// jobAction is one action on a job: what the confirmation says it does.
type jobAction struct {
	Name, Label, Explains string
	applies               func(jobView) bool
}

func jobActions() []jobAction {
	return []jobAction{
		{"requeue", "Requeue",
			"Requeue looks the job's task up in the queue (Redis) and, when the queue no longer holds it, enqueues it again from the payload recorded in PostgreSQL, as `idemgate jobs requeue` does. A task the queue still holds is left alone. The job's record is not changed; the worker's fencing token keeps a second run from repeating the effect.",
			func(v jobView) bool { return v.CanRequeue }},
		{"replay", "Replay",
			"Replay runs the failed job again, as `idemgate dlq replay` does: its archived task goes back to pending in the queue (or a new task with the same id is enqueued from the recorded payload when the archive no longer has it), and its record in PostgreSQL goes back to queued.",
			func(v jobView) bool { return v.CanReplay }},
		{"delete", "Delete",
			"Delete removes the failed job, as `idemgate dlq delete` does: its archived task from the queue and its record from the jobs table. The attempt ledger and the execution of its business key stay; the idempotency record of its request is not touched.",
			func(v jobView) bool { return v.CanDelete }},
		{"run-now", "Run now",
			"Run now makes the job's next attempt due at once instead of after its backoff: its task, waiting in the queue's retry set, goes to pending, and a worker picks it up. The record moves on as for any attempt; the fencing token keeps the effect from happening twice.",
			func(v jobView) bool { return v.CanRunNow }},
		{"cancel", "Cancel",
			"Cancel stops the job, as `idemgate jobs cancel` and POST /admin/jobs/{id}/cancel do: a job waiting for a worker (scheduled, queued, retrying) becomes cancelled at once and its task is deleted from the queue; a job whose attempt is in flight becomes cancelling, its resource's fencing token moves past the attempt's so the attempt cannot commit a fenced write, and the attempt's end decides between succeeded and cancelled.",
			func(v jobView) bool { return v.CanCancel }},
		{"rerun", "Re-run",
			"Re-run submits the job's payload again as a new job, with its tenant, route and task, through the same path as a request to its enqueue route: the payload is validated against the job's schema, a new record is written and its task enqueued. The new job gets a new id; its page says which job it re-runs, and this job's page links to it. This job stays as it is. A job is re-run once: to try again, re-run the new job. The business key is the same, so a worker applies the effect at most once across both jobs.",
			func(v jobView) bool { return v.CanRerun }},
	}
}

func findJobAction(name string) (jobAction, bool) {
	for _, a := range jobActions() {
		if a.Name == name {
			return a, true
		}
	}
	return jobAction{}, false
}

// confirmView is the confirmation step of an action.
type confirmView struct {
	// Button names the action and what it acts on ("Cancel job"), so
	// that it cannot be read as the way back.
	Action, Label, Button, Explains, Subject, Back string
}

func (c *console) handleJobConfirm(w http.ResponseWriter, r *http.Request) {
	id := gateway.PathParam(r, "id")
	a, ok := findJobAction(gateway.PathParam(r, "action"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such action on a job.")
		return
	}
	v, status, err := c.jobStory(r, id)
	if err != nil {
		c.storyFailed(w, r, status, "job "+id, err)
		return
	}
	if !a.applies(v) {
		c.fail(w, r, http.StatusConflict, a.Label+" does not apply to job "+id+", which is "+string(v.Story.Job.Status)+".")
		return
	}
	c.render(w, r, http.StatusOK, "confirm", a.Label+" job "+id, page{Data: confirmView{
		Action: a.Name, Label: a.Label, Button: a.Label + " job", Explains: a.Explains, Subject: "job " + id, Back: c.jobURL(id)}})
}

func (c *console) handleJobAction(w http.ResponseWriter, r *http.Request) {
	id := gateway.PathParam(r, "id")
	a, ok := findJobAction(gateway.PathParam(r, "action"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such action on a job.")
		return
	}
	ctx := r.Context()
	reason, ok := c.reason(w, r)
	if !ok {
		return
	}
	log := c.opts.Logger.With("job_id", id, "action", a.Name)
	switch a.Name {
	case "requeue":
		if c.opts.Requeue == nil {
			break
		}
		rec, sent, err := c.opts.Requeue.Requeue(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			c.fail(w, r, http.StatusNotFound, "No job "+id+".")
		case errors.Is(err, job.ErrFinished) && rec.Status == job.StatusSucceeded:
			seeOther(w, r, c.jobURL(id), "already-succeeded")
		case errors.Is(err, job.ErrFinished):
			c.fail(w, r, http.StatusConflict, "Job "+id+" is "+string(rec.Status)+" and was not requeued"+finishedHint(rec.Status)+".")
		case err != nil:
			c.actionFailed(w, r, "requeue", err)
		case sent:
			log.InfoContext(ctx, "job requeued by an operator from the console")
			c.record(r, job.Action{Action: "requeue", Tenant: rec.Tenant, JobID: id, Reason: reason})
			seeOther(w, r, c.jobURL(id), "requeued")
		default:
			seeOther(w, r, c.jobURL(id), "present")
		}
		return
	case "replay":
		if c.opts.DeadLetters == nil {
			break
		}
		rec, err := c.opts.DeadLetters.Replay(ctx, id)
		if c.deadLetterFailed(w, r, id, "replay", err) {
			return
		}
		log.InfoContext(ctx, "failed job replayed by an operator from the console")
		c.record(r, job.Action{Action: "replay", Tenant: rec.Tenant, JobID: id, Reason: reason})
		seeOther(w, r, c.jobURL(id), "replayed")
		return
	case "run-now":
		if c.opts.DeadLetters == nil {
			break
		}
		rec, err := c.opts.DeadLetters.RunNow(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			c.fail(w, r, http.StatusNotFound, "No job "+id+".")
		case errors.Is(err, job.ErrNotBackingOff):
			c.fail(w, r, http.StatusConflict, "Job "+id+" is not waiting for a retry: "+err.Error()+".")
		case err != nil:
			c.actionFailed(w, r, "run now", err)
		default:
			log.InfoContext(ctx, "job run now by an operator from the console")
			c.record(r, job.Action{Action: "run-now", Tenant: rec.Tenant, JobID: id, Reason: reason})
			seeOther(w, r, c.jobURL(id), "run-now")
		}
		return
	case "cancel":
		if c.opts.Cancel == nil {
			break
		}
		rec, _, err := c.opts.Cancel.CancelByID(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			c.fail(w, r, http.StatusNotFound, "No job "+id+".")
		case errors.Is(err, job.ErrNotCancellable):
			c.fail(w, r, http.StatusConflict, "Job "+id+" is "+string(rec.Status)+" and cannot be cancelled: its end is already decided.")
		case err != nil:
			c.actionFailed(w, r, "cancel", err)
		case rec.Status == job.StatusCancelling:
			log.InfoContext(ctx, "job cancel requested by an operator from the console; an attempt is in flight")
			c.record(r, job.Action{Action: "cancel", Tenant: rec.Tenant, JobID: id, Reason: reason})
			seeOther(w, r, c.jobURL(id), "cancelling")
		default:
			log.InfoContext(ctx, "job cancelled by an operator from the console")
			c.record(r, job.Action{Action: "cancel", Tenant: rec.Tenant, JobID: id, Reason: reason})
			seeOther(w, r, c.jobURL(id), "cancelled")
		}
		return
	case "rerun":
		if c.opts.Rerun == nil {
			break
		}
		rec, err := c.opts.Rerun(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			c.fail(w, r, http.StatusNotFound, "No job "+id+".")
			return
		case errors.Is(err, job.ErrNotRerunnable):
			c.fail(w, r, http.StatusConflict, "Job "+id+" has not been cancelled and has not failed: only a job that ended so is re-run.")
			return
		case errors.Is(err, job.ErrUnknownTask):
			c.fail(w, r, http.StatusConflict, "Job "+id+"'s task is not declared in this gateway's configuration any more: its payload cannot be submitted again.")
			return
		case err != nil && !errors.Is(err, job.ErrTaskDeferred):
			c.actionFailed(w, r, "re-run", err)
			return
		}
		log.InfoContext(ctx, "job re-run as a new job by an operator from the console", "new_job_id", rec.ID)
		c.record(r, job.Action{Action: "rerun", Tenant: rec.Tenant, JobID: id, Reason: reason},
			job.Action{Tenant: rec.Tenant, JobID: id}, job.Action{Tenant: rec.Tenant, JobID: rec.ID})
		seeOther(w, r, c.jobURL(rec.ID), "rerun")
		return
	case "delete":
		if c.opts.DeadLetters == nil {
			break
		}
		tenant := ""
		if c.opts.Jobs != nil {
			if rec, err := c.opts.Jobs.ByID(ctx, id); err == nil {
				tenant = rec.Tenant
			}
		}
		err := c.opts.DeadLetters.Delete(ctx, id)
		if c.deadLetterFailed(w, r, id, "delete", err) {
			return
		}
		log.InfoContext(ctx, "failed job deleted by an operator from the console")
		c.record(r, job.Action{Action: "delete", Tenant: tenant, JobID: id, Reason: reason})
		seeOther(w, r, c.opts.Prefix+"/jobs", "job-deleted")
		return
	}
	c.fail(w, r, http.StatusConflict, a.Label+" needs the queue: this gateway has no redis_url.")
}

func finishedHint(s job.Status) string {
	if s == job.StatusFailed {
		return ": a failed job is replayed instead"
	}
	return ": a cancelled job does not run again"
}

// deadLetterFailed renders a failed replay or delete and reports whether
// it did.
func (c *console) deadLetterFailed(w http.ResponseWriter, r *http.Request, id, op string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, job.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No job "+id+".")
	case errors.Is(err, job.ErrNotFailed):
		c.fail(w, r, http.StatusConflict, "Job "+id+" has not failed: only a failed job can be replayed or deleted.")
	default:
		c.actionFailed(w, r, op, err)
	}
	return true
}

func (c *console) actionFailed(w http.ResponseWriter, r *http.Request, op string, err error) {
	c.opts.Logger.WarnContext(r.Context(), "console: "+op+" failed", "err", err)
	c.fail(w, r, http.StatusServiceUnavailable, "The "+op+" failed: a store could not be reached. Nothing may have changed; look at the page again and retry.")
}

// reason reads the reason an operator typed on a confirmation page; a
// reason too long is refused (400) and reason reports false.
func (c *console) reason(w http.ResponseWriter, r *http.Request) (string, bool) {
	reason := r.PostFormValue("reason")
	if job.CheckReason(reason) != nil {
		c.fail(w, r, http.StatusBadRequest, "The reason is at most 1000 bytes of text.")
		return "", false
	}
	return reason, true
}

// record keeps an action done from the console in the audit trail
// (Options.Audit), with targets for a bulk action.
func (c *console) record(r *http.Request, a job.Action, targets ...job.Action) {
	if c.opts.Audit == nil {
		return
	}
	a.Via = "console"
	_, _ = c.opts.Audit.Record(r.Context(), r, a, targets...)
}
