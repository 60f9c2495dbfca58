package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/job"
)

// The fairness pools' series, exposed by the worker. They are labelled by
// tenant: a pool serves the tenants of one deployment, and telling how
// each one is served is their point.
const (
	MetricFairDwell    = "idemgate_fair_dwell_seconds"
	MetricFairDispatch = "idemgate_fair_dispatch_total"
)

// FairMetrics counts what the fairness pools do: a job.FairObserver.
type FairMetrics struct {
	dwell    *prometheus.HistogramVec
	dispatch *prometheus.CounterVec
}

var _ job.FairObserver = (*FairMetrics)(nil)

// NewFairMetrics registers the fairness series on reg.
func NewFairMetrics(reg prometheus.Registerer) *FairMetrics {
	m := &FairMetrics{
		dwell: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricFairDwell,
			Help:    "How long a pooled job waited from its submit to its first start, by fairness pool and tenant.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
		}, []string{"pool", "tenant"}),
		dispatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFairDispatch,
			Help: "Jobs a fairness pool handed to asynq, by pool and tenant.",
		}, []string{"pool", "tenant"}),
	}
	reg.MustRegister(m.dwell, m.dispatch)
	return m
}

// Dispatched counts a job of tenant handed to asynq.
func (m *FairMetrics) Dispatched(pool, tenant string) { m.dispatch.WithLabelValues(pool, tenant).Inc() }

// Dwelt observes a job's wait from submit to start.
func (m *FairMetrics) Dwelt(pool, tenant string, d time.Duration) {
	m.dwell.WithLabelValues(pool, tenant).Observe(d.Seconds())
}
