package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
)

// The pauses' and breakers' series, exposed by the worker.
const (
	MetricPauseBounces = "idemgate_pause_bounces_total"
	MetricBreakerOpen  = "idemgate_breaker_open_total"
	MetricBreakersOpen = "idemgate_breakers_open"
)

// pauseMetrics counts the pauses' events; WorkerMetrics embeds it, so it
// is a workers.PauseObserver too.
type pauseMetrics struct {
	bounces *prometheus.CounterVec
	opened  *prometheus.CounterVec
}

var _ workers.PauseObserver = (*WorkerMetrics)(nil)

func newPauseMetrics(reg prometheus.Registerer) *pauseMetrics {
	m := &pauseMetrics{
		bounces: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPauseBounces,
			Help: "Deliveries a pause sent back without an attempt, by task and by what was paused (task, queue, limit).",
		}, []string{"task", "paused"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBreakerOpen,
			Help: "Times a flow limit's breaker (pause_after) paused one of its key values, by limit, counted by the worker that opened it.",
		}, []string{"limit"}),
	}
	reg.MustRegister(m.bounces, m.opened)
	return m
}

// PauseBounced counts a delivery a pause sent back.
func (m *pauseMetrics) PauseBounced(task string, kind job.PauseKind) {
	m.bounces.WithLabelValues(task, string(kind)).Inc()
}

// BreakerOpened counts a breaker that opened.
func (m *pauseMetrics) BreakerOpened(limit string) {
	m.opened.WithLabelValues(limit).Inc()
}

// RegisterOpenBreakers registers idemgate_breakers_open{limit} for each
// limit in limits: how many of its key values its breaker holds paused
// now, as open reports when scraped (job.PauseCache.OpenBreakers). Each
// limit's breaker-open count starts at 0 too.
func (m *WorkerMetrics) RegisterOpenBreakers(reg prometheus.Registerer, limits []string, open func() map[string]int) {
	g := &breakerGauge{
		vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricBreakersOpen,
			Help: "Key values of a flow limit its breaker holds paused now, by limit.",
		}, []string{"limit"}),
		limits: limits,
		open:   open,
	}
	for _, name := range limits {
		m.opened.WithLabelValues(name)
		g.vec.WithLabelValues(name)
	}
	reg.MustRegister(g)
}

// breakerGauge reads the open breakers when scraped.
type breakerGauge struct {
	vec    *prometheus.GaugeVec
	limits []string
	open   func() map[string]int
}

func (g *breakerGauge) Describe(ch chan<- *prometheus.Desc) { g.vec.Describe(ch) }

func (g *breakerGauge) Collect(ch chan<- prometheus.Metric) {
	open := g.open()
	for _, name := range g.limits {
		g.vec.WithLabelValues(name).Set(float64(open[name]))
	}
	g.vec.Collect(ch)
}
