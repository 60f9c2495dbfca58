package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the gateway's Prometheus series. Names are a public
// interface: dashboards and alerts depend on them.
type Metrics struct {
	Registry        *prometheus.Registry
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	upstream        *prometheus.HistogramVec
	store           *prometheus.HistogramVec
	inFlight        prometheus.Gauge
	shed            prometheus.Counter
	waiters         prometheus.Gauge
	waitsRefused    *prometheus.CounterVec
	memoryStore     *memoryStoreCollector
	// adminAuthFailures counts the admin listener's refusals (AdminGuard).
	adminAuthFailures *prometheus.CounterVec
	// adminActions counts operators' actions (Audit).
	adminActions *prometheus.CounterVec
}

// NewMetrics registers the gateway's series (and the Go and process
// collectors) on a registry of their own.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_requests_total",
			Help: "Requests by route and idempotency outcome (new, replay, conflict, mismatch, missing_key, invalid_key, invalid_body, too_large, encoding_refused, store_error, store_full, rate_limited, unauthorized, passthrough, not_found).",
		}, []string{"route", "outcome"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_request_duration_seconds",
			Help:    "Time to answer a request, by route and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14),
		}, []string{"route", "outcome"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_upstream_duration_seconds",
			Help:    "Time the upstream took to answer a proxied request.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14),
		}, []string{"route"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_store_operation_duration_seconds",
			Help:    "Time of idempotency store operations.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2.5, 14),
		}, []string{"store", "op"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_requests_in_flight",
			Help: "Requests the public listener is handling now (not /healthz and /readyz, not those being shed, not the GET /v1/jobs/{id}?wait= being held).",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_requests_shed_total",
			Help: "Requests answered 503 at once because server.max_in_flight requests were in hand.",
		}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_job_waiters",
			Help: "GET /v1/jobs/{id}?wait= being held now (jobs_api.max_waiters).",
		}),
		waitsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_job_waits_refused_total",
			Help: "GET /v1/jobs/{id}?wait= answered at once because the bound named by the label was reached (max_waiters_per_tenant, max_waiters).",
		}, []string{"bound"}),
		memoryStore:       newMemoryStoreCollector(),
		adminAuthFailures: newAdminAuthFailures(),
		adminActions:      newAdminActions(),
	}
	reg.MustRegister(m.requests, m.requestDuration, m.upstream, m.store, m.inFlight, m.shed, m.waiters, m.waitsRefused, m.memoryStore, m.adminAuthFailures, m.adminActions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) request(route, outcome string, d time.Duration) {
	m.requests.WithLabelValues(route, outcome).Inc()
	m.requestDuration.WithLabelValues(route, outcome).Observe(d.Seconds())
}
