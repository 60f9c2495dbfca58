package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// Lister is what the list endpoints need: a *job.Submitter is one. The
// gateway serves GET /v1/jobs and GET /admin/jobs when its Options.Jobs
// is also a Lister.
type Lister interface {
	List(ctx context.Context, f job.ListFilter, limit int) ([]job.Row, job.Cursor, error)
}

// The page size of a job list: limit= defaults to DefaultListLimit and
// may not exceed MaxListLimit.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// handleJobList is GET /v1/jobs: the tenant's own jobs, newest first, a
// page at a time.
func (g *Gateway) handleJobList() http.Handler {
	return g.tenantChain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		telemetry.SetEndpoint(r, "/v1/jobs")
		tenant := auth.Tenant(r.Context())
		if tenant == "" {
			// Authentication always names one; "" would list everyone's.
			g.problems.Write(w, r, &problem.Error{Err: auth.ErrUnauthorized, Detail: "no tenant"})
			return
		}
		g.listJobs(w, r, tenant, false)
	}))
}

// handleAdminJobList is GET /admin/jobs: every tenant's jobs, or one
// tenant's with tenant=.
func (g *Gateway) handleAdminJobList() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.listJobs(w, r, "", true)
	}
}

// listJobs answers a page of jobs: tenant's, or with byTenant the one the
// query's tenant= names (every tenant's without it).
func (g *Gateway) listJobs(w http.ResponseWriter, r *http.Request, tenant string, byTenant bool) {
	l, ok := g.opts.Jobs.(Lister)
	if !ok {
		g.problems.Write(w, r, &problem.Error{Err: ErrNotFound, Detail: "this gateway has no enqueue routes"})
		return
	}
	f, limit, err := parseJobList(r.URL.Query(), byTenant)
	if err != nil {
		g.problems.Write(w, r, err)
		return
	}
	if !byTenant {
		f.Tenant = tenant
	}
	jobs, next, err := l.List(r.Context(), f, limit)
	switch {
	case errors.Is(err, job.ErrBadCursor):
		g.problems.Write(w, r, listFaults([]problem.FieldFault{{Field: "cursor", Message: "not a cursor this gateway handed out; start again without one"}}))
		return
	case err != nil:
		g.problems.Write(w, r, &problem.Error{Err: ErrQueueUnavailable,
			Detail: "the jobs could not be listed now; try again", RetryAfter: time.Second, Cause: err})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, JobListDocument(jobs, next))
}

// JobListDocument is a page of jobs as GET /v1/jobs and GET /admin/jobs
// answer it, and `idemgate jobs list --json` prints it: each job the
// document GET /v1/jobs/{id} shows, then the next page's cursor, absent
// on the last page.
func JobListDocument(jobs []job.Row, next job.Cursor) openapi.JobList {
	doc := openapi.JobList{Items: make([]openapi.Job, len(jobs))}
	for i, j := range jobs {
		doc.Items[i] = jobDocument(j)
	}
	if next != "" {
		s := string(next)
		doc.NextCursor = &s
	}
	return doc
}

// ParseJobList reads a job list's query parameters as GET /admin/jobs
// does (tenant= included): the filter, the page size and, when a
// parameter is wrong, a *problem.Error whose Fields name each
// wrong one. `idemgate jobs list` checks its flags with it.
func ParseJobList(q url.Values) (job.ListFilter, int, error) { return parseJobList(q, true) }

// parseJobList reads a job list's query; tenant= only with byTenant.
// Every parameter that is wrong is named in one answer.
func parseJobList(q url.Values, byTenant bool) (job.ListFilter, int, error) {
	var (
		f      job.ListFilter
		limit  = DefaultListLimit
		faults []problem.FieldFault
	)
	fault := func(field, format string, args ...any) {
		faults = append(faults, problem.FieldFault{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	names := []string{"status", "task", "created_after", "created_before", "limit", "cursor"}
	if byTenant {
		names = append(names, "tenant")
	} else if _, ok := q["tenant"]; ok {
		fault("tenant", "only the admin API (GET /admin/jobs) takes a tenant; this list holds the caller's own jobs")
	}
	one := map[string]string{}
	for _, name := range names {
		vs, ok := q[name]
		switch {
		case !ok:
		case len(vs) != 1:
			fault(name, "given %d times; give it once", len(vs))
		case vs[0] == "":
			fault(name, "empty; leave it out to select every job")
		default:
			one[name] = vs[0]
		}
	}
	if v, ok := one["status"]; ok {
		f.Status = job.Status(v)
		if !validStatus(f.Status) {
			fault("status", "%q is not a job status: one of %s", v, statusList())
		}
	}
	if v, ok := one["task"]; ok {
		f.Task = v
	}
	if v, ok := one["tenant"]; ok {
		f.Tenant = v
		if !auth.ValidTenant(v) {
			fault("tenant", "%q is not a tenant name (1 to 128 of a-z, A-Z, 0-9, _, . and -)", v)
		}
	}
	times := map[string]*time.Time{"created_after": &f.CreatedAfter, "created_before": &f.CreatedBefore}
	for _, name := range []string{"created_after", "created_before"} {
		v, ok := one[name]
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || t.Year() < 1970 || t.Year() > 9999 {
			fault(name, "%q is not a time in RFC 3339 with an offset, such as 2026-12-01T00:00:00Z", v)
			continue
		}
		*times[name] = t
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		fault("created_after", "must be before created_before")
	}
	if v, ok := one["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			fault("limit", "a whole number from 1 to %d, not %q", MaxListLimit, v)
		}
		limit = n
	}
	if v, ok := one["cursor"]; ok {
		f.After = job.Cursor(v)
	}
	if len(faults) > 0 {
		return f, 0, listFaults(faults)
	}
	return f, limit, nil
}

// listFaults is the 400 of a job list's wrong parameters.
func listFaults(faults []problem.FieldFault) error {
	names := make([]string, len(faults))
	for i, ff := range faults {
		names[i] = ff.Field
	}
	return &problem.Error{Err: ErrBadRequest,
		Detail: "the job list's parameters are not valid: " + strings.Join(names, ", "), Fields: faults}
}

func validStatus(s job.Status) bool { return slices.Contains(job.Statuses(), s) }

func statusList() string {
	names := make([]string, 0, len(job.Statuses()))
	for _, s := range job.Statuses() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}
