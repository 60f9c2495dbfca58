package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
)

// batchView is a batch's page: its jobs counted by status, and its items.
type batchView struct {
	ID, Tenant string
	Items      int
	Counts     []statusCount
	Jobs       []job.Row
}

func (c *console) batchURL(id string) string { return c.opts.Prefix + "/batches/" + url.PathEscape(id) }

func (c *console) handleBatch(w http.ResponseWriter, r *http.Request) {
	id := gateway.PathParam(r, "id")
	if c.opts.Jobs == nil {
		c.fail(w, r, http.StatusNotFound, "Batches are kept in PostgreSQL, and this gateway has no database_url.")
		return
	}
	tenant, st, jobs, err := c.opts.Jobs.BatchByID(r.Context(), id)
	switch {
	case errors.Is(err, job.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No batch "+id+".")
		return
	case err != nil:
		c.storeFailed(w, r, "reading batch "+id, err)
		return
	}
	v := batchView{ID: id, Tenant: tenant, Items: st.Items, Jobs: jobs}
	for _, s := range job.Statuses() {
		if n := st.Counts[s]; n > 0 {
			v.Counts = append(v.Counts, statusCount{Status: s, Count: int64(n), Shown: shownCount(int64(n))})
		}
	}
	c.render(w, r, http.StatusOK, "batch", "Batch "+id, page{Data: v})
}
