package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/workers"
)

// The flow limits' series, exposed by the worker next to the others. The
// label is the limit's name, never its key value: values (tenants,
// accounts) are unbounded, and GET /admin/limits/{name} shows the
// busiest of them.
const (
	MetricLimitWaits   = "idemgate_limit_waits_total"
	MetricLimitHolders = "idemgate_limit_holders"
	MetricLimitWait    = "idemgate_limit_wait_seconds"
)

// limitMetrics counts the flow limits' events; WorkerMetrics embeds it,
// so it is a workers.LimitObserver too.
type limitMetrics struct {
	waits   *prometheus.CounterVec
	holders *prometheus.GaugeVec
	wait    *prometheus.HistogramVec
}

var _ workers.LimitObserver = (*WorkerMetrics)(nil)

func newLimitMetrics(reg prometheus.Registerer) *limitMetrics {
	m := &limitMetrics{
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLimitWaits,
			Help: "Deliveries a flow limit made wait before their attempt (in place, or sent back to the queue), by limit and reason (concurrency, rate).",
		}, []string{"limit", "reason"}),
		holders: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricLimitHolders,
			Help: "Slots of a flow limit this worker holds now (sum over workers: every holder).",
		}, []string{"limit"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricLimitWait,
			Help:    "How long a delivery a flow limit refused waited, by limit: in place until admitted, or in place and then the delay it was sent back with.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"limit"}),
	}
	reg.MustRegister(m.waits, m.holders, m.wait)
	return m
}

// InitLimits creates the series of each limit at 0.
func (m *WorkerMetrics) InitLimits(names ...string) {
	for _, n := range names {
		for _, r := range workers.LimitReasons() {
			m.waits.WithLabelValues(n, r)
		}
		m.holders.WithLabelValues(n)
		m.wait.WithLabelValues(n)
	}
}

// LimitWaited counts a delivery a limit sent back, and the wait it got.
func (m *limitMetrics) LimitWaited(name, reason string, wait time.Duration) {
	m.waits.WithLabelValues(name, reason).Inc()
	m.wait.WithLabelValues(name).Observe(wait.Seconds())
}

// LimitHeld follows the slots this worker holds.
func (m *limitMetrics) LimitHeld(name string, delta int) {
	m.holders.WithLabelValues(name).Add(float64(delta))
}
