package console

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/reconcile"
)

// overview is the first page.
type overview struct {
	WindowMinutes int
	Requests      []gateway.RecentRow
	// Statuses counts jobs by status; NoJobs says why there are none.
	Statuses []statusCount
	NoJobs   string
	Stuck    []stuckJob
	// StuckChecked is false when stuck jobs are not looked for.
	StuckChecked bool
	// Charts are the job activity of the last hour and the last day.
	Charts []chart
	// Unreadable says that PostgreSQL could not be read: the page shows
	// what it has without it (the requests this instance counted).
	Unreadable string
}

type statusCount struct {
	Status job.Status
	Count  int64
	// Shown is the count as the page shows it: "10,000+" past maxCounted.
	Shown string
}

// maxCounted is how far the overview counts the jobs of a status: past
// it the count reads "10,000+". Counting further would read the whole
// jobs table, which holds millions of rows at the default retention.
const maxCounted = 10000

// shownCount is n as the overview shows it.
func shownCount(n int64) string {
	if n > maxCounted {
		return "10,000+"
	}
	s := strconv.FormatInt(n, 10)
	if len(s) > 3 {
		s = s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s
}

type stuckJob struct {
	ID, Detail, URL string
}

// maxStuckShown bounds the stuck jobs the overview lists.
const maxStuckShown = 50

func (c *console) handleOverview(w http.ResponseWriter, r *http.Request) {
	o := overview{WindowMinutes: int(gateway.RecentWindow / time.Minute), Requests: c.opts.Requests.Rows()}
	if c.opts.Jobs == nil {
		o.NoJobs = "Jobs are kept in PostgreSQL, and this gateway has no database_url."
	} else {
		counts, err := c.opts.Jobs.CountByStatusUpTo(r.Context(), maxCounted+1)
		if err != nil {
			c.unreadable(r, &o, "counting jobs", err)
		}
		for _, s := range job.Statuses() {
			if err == nil {
				o.Statuses = append(o.Statuses, statusCount{s, counts[s], shownCount(counts[s])})
			}
		}
		if err == nil {
			now := c.opts.Now().UTC()
			for _, w := range chartWindows {
				since := now.Add(-w.window).Truncate(w.bucket).Add(w.bucket)
				acts, err := c.opts.Jobs.Activity(r.Context(), since, now, w.bucket)
				if err != nil {
					c.unreadable(r, &o, "reading job activity", err)
					break
				}
				o.Charts = append(o.Charts, newChart(w.id, w.title, w.per, acts))
			}
		}
	}
	if c.opts.Stuck != nil && o.Unreadable == "" {
		violations, err := c.opts.Stuck(r.Context())
		if err != nil {
			c.unreadable(r, &o, "looking for stuck jobs", err)
		}
		o.StuckChecked = true
		for _, v := range violations {
			if len(o.Stuck) == maxStuckShown {
				break
			}
			if len(v.IDs) == 0 {
				continue
			}
			o.Stuck = append(o.Stuck, stuckJob{ID: v.IDs[0], Detail: v.Detail, URL: c.jobURL(v.IDs[0])})
		}
	}
	c.render(w, r, http.StatusOK, "overview", "Overview", page{Data: o})
}

// unreadable notes on the overview that PostgreSQL could not be read; the
// page still shows the rest. The cause goes to the log.
func (c *console) unreadable(r *http.Request, o *overview, what string, err error) {
	c.opts.Logger.WarnContext(r.Context(), "console: "+what+" failed", "err", err)
	o.Unreadable = "PostgreSQL could not be read (" + what + "): jobs by status and stuck jobs are not shown. The requests above are this instance's own count. Reload in a moment."
}

// StuckJobs is Options.Stuck as `idemgate reconcile` sees it: the
// reconcile.StuckJobs check alone, over one snapshot of db, with opts
// (StuckAfter > 0; TaskState names where the queue holds each task).
func StuckJobs(db reconcile.DB, opts reconcile.Options) func(ctx context.Context) ([]reconcile.Violation, error) {
	return func(ctx context.Context) ([]reconcile.Violation, error) {
		report, err := reconcile.Run(ctx, db, io.Discard, opts, reconcile.StuckJobs())
		return report.Violations, err
	}
}
