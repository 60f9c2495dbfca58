package console

import (
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
)

// scheduleSlots is how many of a schedule's latest slots its page lists.
const scheduleSlots = 50

// schedulesPage is the list of schedules.
type schedulesPage struct {
	Tenant string
	Rows   []scheduleRow
	Next   string
	// NoSchedules says why there is no list (no database); Unreadable
	// that PostgreSQL could not be read.
	NoSchedules, Unreadable string
}

// scheduleRow is one schedule of the list.
type scheduleRow struct {
	job.ScheduleRow
	URL string
}

// scheduleView is one schedule's page.
type scheduleView struct {
	Schedule job.Recurring
	Upcoming []time.Time
	Slots    []slotView
	// SlotsLimit is how many slots the page lists at most.
	SlotsLimit int
}

// slotView is one slot as a schedule's page lists it.
type slotView struct {
	job.Slot
	// Reason is why a skipped slot did not fire; "" for a fired one.
	Reason string
}

// skipReasons says why a slot was skipped, by its outcome.
var skipReasons = map[job.SlotOutcome]string{
	job.SlotSkippedOverlap: "overlap",
	job.SlotSkippedMissed:  "missed",
	job.SlotSkippedPaused:  "paused",
}

func (c *console) scheduleURL(tenant, id string) string {
	return c.opts.Prefix + "/schedules/" + url.PathEscape(tenant) + "/" + url.PathEscape(id)
}

func (c *console) handleSchedules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := schedulesPage{Tenant: q.Get("tenant")}
	if c.opts.Schedules == nil {
		p.NoSchedules = "Schedules are kept in PostgreSQL, and this gateway has no database_url."
		c.render(w, r, http.StatusOK, "schedules", "Schedules", page{Data: p})
		return
	}
	rows, next, err := c.opts.Schedules.Page(r.Context(), p.Tenant, job.ScheduleCursor(q.Get("after")), pageSize)
	switch {
	case errors.Is(err, job.ErrBadCursor):
		c.fail(w, r, http.StatusBadRequest, "The page cursor (after=) is not one this console made; start from the first page.")
		return
	case err != nil:
		c.opts.Logger.WarnContext(r.Context(), "console: listing schedules failed", "err", err)
		p.Unreadable = "PostgreSQL could not be read (listing schedules): no schedule is listed. Reload in a moment."
		c.render(w, r, http.StatusOK, "schedules", "Schedules", page{Data: p})
		return
	}
	for _, row := range rows {
		p.Rows = append(p.Rows, scheduleRow{ScheduleRow: row, URL: c.scheduleURL(row.Tenant, row.ID)})
	}
	if next != "" {
		nq := url.Values{"after": {string(next)}}
		if p.Tenant != "" {
			nq.Set("tenant", p.Tenant)
		}
		p.Next = c.opts.Prefix + "/schedules?" + nq.Encode()
	}
	c.render(w, r, http.StatusOK, "schedules", "Schedules", page{Data: p})
}

func (c *console) handleSchedule(w http.ResponseWriter, r *http.Request) {
	tenant, id := gateway.PathParam(r, "tenant"), gateway.PathParam(r, "id")
	what := "schedule " + id + " of " + tenant
	if c.opts.Schedules == nil {
		c.fail(w, r, http.StatusNotFound, "Schedules are kept in PostgreSQL, and this gateway has no database_url.")
		return
	}
	rec, err := c.opts.Schedules.Get(r.Context(), tenant, id)
	switch {
	case errors.Is(err, job.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No "+what+" (or it was deleted).")
		return
	case err != nil:
		c.storeFailed(w, r, "reading "+what, err)
		return
	}
	slots, err := c.opts.Schedules.Slots(r.Context(), tenant, id, scheduleSlots, false)
	if err != nil {
		c.storeFailed(w, r, "reading the slots of "+what, err)
		return
	}
	v := scheduleView{Schedule: rec, Upcoming: rec.Upcoming(c.opts.Now(), gateway.NextFireTimes), SlotsLimit: scheduleSlots}
	for _, s := range slots {
		v.Slots = append(v.Slots, slotView{Slot: s, Reason: skipReasons[s.Outcome]})
	}
	c.render(w, r, http.StatusOK, "schedule", "Schedule "+id, page{Data: v})
}
