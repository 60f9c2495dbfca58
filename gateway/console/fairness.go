package console

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
)

// Fairness reads the fairness pools (*job.Fairness): what GET
// /admin/fairness/{pool} answers, and the declared pools' names.
type Fairness interface {
	// Pools lists the declared pools' names.
	Pools() []string
	// Weights returns the pool's declaration and effective weights; ok
	// false for a pool not declared.
	Weights(ctx context.Context, pool string) (def job.FairPool, w job.FairWeights, ok bool, err error)
	// Backlog returns the pool's jobs by tenant and how many are in
	// flight.
	Backlog(ctx context.Context, pool string) ([]job.FairBacklog, int, error)
	// Measured returns what the pool dispatched over the last window, by
	// tenant, as its dispatchers counted it.
	Measured(ctx context.Context, pool string, window time.Duration) ([]job.FairMeasure, error)
}

// The windows a pool's page measures over.
const (
	fairShortWindow = 5 * time.Minute
	fairLongWindow  = time.Hour
)

var _ Fairness = (*job.Fairness)(nil)

// fairnessPage is the list of pools.
type fairnessPage struct {
	Pools []fairPoolRow
	// NoPools says why none is listed.
	NoPools string
}

// fairPoolRow is one pool of the list.
type fairPoolRow struct {
	Name, URL     string
	Window        int
	DefaultWeight float64
	// Weighted is how many tenants have a weight of their own.
	Weighted int
	// Unreadable: Redis could not be read, the weights are the
	// configured ones.
	Unreadable bool
}

// fairPoolView is one pool's page.
type fairPoolView struct {
	Name          string
	Window        int
	DefaultWeight float64
	InFlight      int
	Tenants       []fairTenant
	// Unreadable says Redis could not be read: the configured weights
	// are shown, the backlog is not.
	Unreadable string
}

// fairTenant is a tenant's row of a pool's page.
type fairTenant struct {
	Tenant                   string
	Weight                   float64
	Ready, Delayed, InFlight int
	// Share is the tenant's share of the dispatches while every tenant
	// with jobs ready keeps some, in percent; 0 without jobs ready.
	Share float64
	// Recent is what the pool dispatched of the tenant's jobs over the
	// last fairShortWindow, Hour over the last fairLongWindow.
	Recent, Hour job.FairMeasure
}

// MeasuredShare is the tenant's measured share of the last minutes'
// dispatches, "—" without any.
func (t fairTenant) MeasuredShare() string { return measuredShare(t.Recent) }

// HourShare is MeasuredShare over the last hour.
func (t fairTenant) HourShare() string { return measuredShare(t.Hour) }

func measuredShare(m job.FairMeasure) string {
	if m.Dispatched == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", m.Share)
}

// Dwell is the tenant's mean dwell and p99 bound over the last minutes,
// "—" without any first dispatch.
func (t fairTenant) Dwell() string {
	m := t.Recent
	if m.Dwelt == 0 {
		return "—"
	}
	p99 := "> " + shortDuration(30*time.Minute)
	if m.DwellP99 >= 0 {
		p99 = "≤ " + shortDuration(m.DwellP99)
	}
	return shortDuration(m.DwellMean) + " / " + p99
}

// shortDuration is d rounded for a table: milliseconds under a second,
// else a tenth of a second.
func shortDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func (c *console) fairnessURL(pool string) string {
	return c.opts.Prefix + "/fairness/" + url.PathEscape(pool)
}

func (c *console) handleFairness(w http.ResponseWriter, r *http.Request) {
	var p fairnessPage
	var pools []string
	if c.opts.Fairness != nil {
		pools = c.opts.Fairness.Pools()
	}
	if len(pools) == 0 {
		p.NoPools = "No fairness pool is declared (fairness: in the configuration): every job goes to the queue as it is submitted."
	}
	for _, name := range pools {
		def, weights, _, err := c.opts.Fairness.Weights(r.Context(), name)
		if err != nil {
			c.opts.Logger.WarnContext(r.Context(), "console: reading a fairness pool failed", "pool", name, "err", err)
		}
		p.Pools = append(p.Pools, fairPoolRow{Name: name, URL: c.fairnessURL(name), Window: def.Window,
			DefaultWeight: weights.Default, Weighted: len(weights.Weights), Unreadable: err != nil})
	}
	c.render(w, r, http.StatusOK, "fairness", "Fairness", page{Data: p})
}

func (c *console) handleFairPool(w http.ResponseWriter, r *http.Request) {
	name := gateway.PathParam(r, "pool")
	if c.opts.Fairness == nil {
		c.fail(w, r, http.StatusNotFound, "No fairness pool "+name+": none is declared.")
		return
	}
	def, weights, ok, err := c.opts.Fairness.Weights(r.Context(), name)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No fairness pool "+name+" is declared under fairness.")
		return
	}
	v := fairPoolView{Name: def.Name, Window: def.Window, DefaultWeight: weights.Default}
	var backlog []job.FairBacklog
	var recent, hour []job.FairMeasure
	if err == nil {
		backlog, v.InFlight, err = c.opts.Fairness.Backlog(r.Context(), name)
	}
	if err == nil {
		recent, err = c.opts.Fairness.Measured(r.Context(), name, fairShortWindow)
	}
	if err == nil {
		hour, err = c.opts.Fairness.Measured(r.Context(), name, fairLongWindow)
	}
	if err != nil {
		c.opts.Logger.WarnContext(r.Context(), "console: reading a fairness pool failed", "pool", name, "err", err)
		v.Unreadable = "Redis, which holds the pool with the queue, could not be read: the configured weights are shown, the jobs waiting and in flight and the measured shares are not. Reload in a moment."
		backlog, recent, hour = nil, nil, nil
	}
	v.Tenants = fairTenants(weights, backlog, recent, hour)
	c.render(w, r, http.StatusOK, "pool", "Fairness pool "+name, page{Data: v})
}

// fairTenants are the tenants of a pool's page: those with jobs in it,
// those with a weight of their own and those dispatched in the last hour,
// by name. A tenant's share is its weight over the weights of every
// tenant with jobs ready, which is how start-time fair queuing divides
// the dispatches between them; its measured shares are what the
// dispatchers counted.
func fairTenants(w job.FairWeights, backlog []job.FairBacklog, recent, hour []job.FairMeasure) []fairTenant {
	by := map[string]*fairTenant{}
	tenant := func(name string) *fairTenant {
		if by[name] == nil {
			by[name] = &fairTenant{Tenant: name}
		}
		return by[name]
	}
	for t := range w.Weights {
		tenant(t)
	}
	for _, b := range backlog {
		t := tenant(b.Tenant)
		t.Ready, t.Delayed, t.InFlight = b.Ready, b.Delayed, b.InFlight
	}
	for _, m := range recent {
		tenant(m.Tenant).Recent = m
	}
	for _, m := range hour {
		tenant(m.Tenant).Hour = m
	}
	var ready float64
	for _, t := range by {
		t.Weight = w.Weight(t.Tenant)
		if t.Ready > 0 {
			ready += t.Weight
		}
	}
	out := make([]fairTenant, 0, len(by))
	for _, name := range slices.Sorted(maps.Keys(by)) {
		t := by[name]
		if t.Ready > 0 && ready > 0 {
			t.Share = 100 * t.Weight / ready
		}
		out = append(out, *t)
	}
	return out
}
