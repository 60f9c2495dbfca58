package console

import (
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
)

// searchPage is what the search box found.
type searchPage struct {
	Query string
	// Kind says what the query was taken as ("payload field order_id").
	Kind string
	Jobs []job.Row
	// Capped: there may be more matches than the page shows.
	Capped bool
	// Since bounds a payload search (jobs created after it); Within is
	// that bound as typed ("24h").
	Since  time.Time
	Within string
	// Scanned is set when the window held more jobs than a payload search
	// reads: Since is then the oldest of the newest Scanned.
	Scanned int
	NoJobs  string
	// Unreadable says PostgreSQL could not be read.
	Unreadable string
	Now        time.Time
}

// searchCap bounds each kind of search: past it the page says so.
const searchCap = 50

// defaultWithin and maxWithin bound a payload search: the payload has no
// index, so a search reads the jobs created in that window (index
// jobs_created) and no further: at 3M jobs over 30 days a search that
// matched nothing read for 0.2-0.3 s before job.PayloadScan bounded it.
const (
	defaultWithin = time.Hour
	maxWithin     = 7 * 24 * time.Hour
)

// payloadQuery is field=value: a top-level payload field and its value.
var payloadQuery = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]{0,63})=(.+)$`)

// handleSearch takes what an operator holds (a job id, an idempotency
// key, a business key, or a payload field=value) and goes to the one job
// it names, or lists the jobs it matches. Every lookup is one range of an
// index; a payload search reads only the jobs of its time window.
func (c *console) handleSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := searchPage{Query: strings.TrimSpace(q.Get("q")), Within: q.Get("within"), Now: c.opts.Now()}
	within := defaultWithin
	if p.Within != "" {
		d, err := time.ParseDuration(p.Within)
		if err != nil || d <= 0 || d > maxWithin {
			c.fail(w, r, http.StatusBadRequest, "within is a duration up to 168h (7 days), such as 24h, not "+p.Within+".")
			return
		}
		within = d
	}
	p.Within = strings.TrimSuffix(strings.TrimSuffix(within.String(), "0s"), "0m")
	if p.Query == "" {
		c.render(w, r, http.StatusOK, "search", "Search", page{Data: p})
		return
	}
	if !job.Storable(p.Query) {
		c.fail(w, r, http.StatusBadRequest, "The search holds a character no id or key can hold.")
		return
	}
	if c.opts.Jobs == nil {
		p.NoJobs = "Jobs are kept in PostgreSQL, and this gateway has no database_url."
		c.render(w, r, http.StatusOK, "search", "Search", page{Data: p})
		return
	}
	jobs, err := c.search(r, &p, within)
	if err != nil {
		c.opts.Logger.WarnContext(r.Context(), "console: searching failed", "err", err)
		p.Unreadable = "PostgreSQL could not be read (searching jobs): nothing is found. Reload in a moment."
		c.render(w, r, http.StatusOK, "search", "Search", page{Data: p})
		return
	}
	if len(jobs) == 1 {
		http.Redirect(w, r, c.jobURL(jobs[0].ID), http.StatusSeeOther)
		return
	}
	p.Jobs = jobs
	c.render(w, r, http.StatusOK, "search", "Search "+p.Query, page{Data: p})
}

// search finds the jobs p.Query names.
func (c *console) search(r *http.Request, p *searchPage, within time.Duration) ([]job.Row, error) {
	ctx := r.Context()
	m := payloadQuery.FindStringSubmatch(p.Query)
	if m == nil {
		p.Kind = "job id, idempotency key or business key"
		return c.searchKeys(r, p)
	}
	p.Kind = "payload field " + m[1]
	p.Since = p.Now.Add(-within)
	jobs, from, err := c.opts.Jobs.ByPayload(ctx, m[1], m[2], p.Since, searchCap+1)
	if from.After(p.Since) {
		p.Since, p.Scanned = from, job.PayloadScan
	}
	if err != nil || len(jobs) > 0 {
		return c.capped(p, jobs), err
	}
	// A key may hold "=" too: the page says what the payload search read
	// unless the text names a job that way.
	return c.searchKeys(r, p)
}

// searchKeys finds the job p.Query is the id of, or the jobs it is the
// idempotency key or business key of.
func (c *console) searchKeys(r *http.Request, p *searchPage) ([]job.Row, error) {
	ctx := r.Context()
	rec, err := c.opts.Jobs.ByID(ctx, p.Query)
	switch {
	case err == nil:
		return []job.Row{rec}, nil
	case !errors.Is(err, job.ErrNotFound):
		return nil, err
	}
	byKey, err := c.opts.Jobs.ByIdempotencyKey(ctx, p.Query, searchCap+1)
	if err != nil {
		return nil, err
	}
	byBusiness, err := c.opts.Jobs.ByBusinessKey(ctx, p.Query, searchCap+1)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var jobs []job.Row
	for _, j := range append(byKey, byBusiness...) {
		if !seen[j.ID] {
			seen[j.ID] = true
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b job.Row) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return c.capped(p, jobs), nil
}

func (c *console) capped(p *searchPage, jobs []job.Row) []job.Row {
	if len(jobs) > searchCap {
		p.Capped = true
		jobs = jobs[:searchCap]
	}
	return jobs
}
