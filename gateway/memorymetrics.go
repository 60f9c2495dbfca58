package gateway

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// boundedStore is an idempotency store that keeps its records in the
// process, up to a bound (memstore with WithMaxBytes): how full it is
// and what the bound refused are exported, since a full store refuses
// new keys.
type boundedStore interface {
	Bytes() int64
	MaxBytes() int64
	Refused() int64
}

// memoryStoreCollector exports a boundedStore's fill; it exports nothing
// until a gateway with such a store is built.
type memoryStoreCollector struct {
	store                 atomic.Pointer[boundedStore]
	bytes, limit, refused *prometheus.Desc
}

func newMemoryStoreCollector() *memoryStoreCollector {
	return &memoryStoreCollector{
		bytes: prometheus.NewDesc("idemgate_memory_store_bytes",
			"What the memory store's records hold (keys, fingerprints, stored headers and bodies, a fixed overhead each), expired ones until the janitor deletes them.", nil, nil),
		limit: prometheus.NewDesc("idemgate_memory_store_max_bytes",
			"idempotency.memory.max_bytes: past it the memory store refuses new keys.", nil, nil),
		refused: prometheus.NewDesc("idemgate_memory_store_refusals_total",
			"New keys the memory store refused because it held idempotency.memory.max_bytes, or their tenant its max_bytes_per_tenant (503 idempotency-store-full).", nil, nil),
	}
}

// watch exports s when it is bounded.
func (c *memoryStoreCollector) watch(s any) {
	if b, ok := s.(boundedStore); ok && b.MaxBytes() > 0 {
		c.store.Store(&b)
	}
}

func (c *memoryStoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.limit
	ch <- c.refused
}

func (c *memoryStoreCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.store.Load()
	if p == nil {
		return
	}
	s := *p
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes()))
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.MaxBytes()))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused()))
}
