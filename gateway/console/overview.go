package console

import (
	"context"
	"io"
	"net/http"
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
}

type statusCount struct {
	Status job.Status
	Count  int64
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
		counts, err := c.opts.Jobs.CountByStatus(r.Context())
		if err != nil {
			c.storeFailed(w, r, "counting jobs", err)
			return
		}
		for _, s := range job.Statuses() {
			o.Statuses = append(o.Statuses, statusCount{s, counts[s]})
		}
	}
	if c.opts.Stuck != nil {
		violations, err := c.opts.Stuck(r.Context())
		if err != nil {
			c.storeFailed(w, r, "looking for stuck jobs", err)
			return
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

// StuckJobs is Options.Stuck as `idemgate reconcile` sees it: the
// reconcile.StuckJobs check alone, over one snapshot of db, with opts
// (StuckAfter > 0; TaskState names where the queue holds each task).
func StuckJobs(db reconcile.DB, opts reconcile.Options) func(ctx context.Context) ([]reconcile.Violation, error) {
	return func(ctx context.Context) ([]reconcile.Violation, error) {
		report, err := reconcile.Run(ctx, db, io.Discard, opts, reconcile.StuckJobs())
		return report.Violations, err
	}
}
