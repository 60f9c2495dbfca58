package telemetry

import (
	"log/slog"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// queueScrapeTimeout bounds one scrape of the queues: past it the queues
// not yet read are left out of that scrape. Each read is itself bounded by
// the inspector's Redis timeouts (asynq's default read timeout is 3s), so a
// scrape ends within about both, under Prometheus' default 10s.
const queueScrapeTimeout = 5 * time.Second

// QueueCollector reports the asynq queues at scrape time:
// idemgate_queue_depth{queue,state} (pending, active, scheduled, retry,
// archived) and idemgate_dlq_tasks{queue}, the archived tasks — the dead
// letter queue. A queue asynq has not seen yet reports 0. A queue that
// cannot be read is logged and left out of that scrape; the rest of
// /metrics is still served.
type QueueCollector struct {
	inspector *asynq.Inspector
	queues    []string
	logger    *slog.Logger
	timeout   time.Duration
	dlq       *prometheus.Desc
	depth     *prometheus.Desc
}

var _ prometheus.Collector = (*QueueCollector)(nil)

// NewQueueCollector returns a collector of queues (the worker's configured
// queues; nil: every queue asynq knows at each scrape) read through
// inspector, which the caller closes. Problems go to logger (nil: discarded).
func NewQueueCollector(inspector *asynq.Inspector, queues []string, logger *slog.Logger) *QueueCollector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if queues != nil {
		queues = slices.Compact(slices.Sorted(slices.Values(queues)))
	}
	return &QueueCollector{
		inspector: inspector,
		queues:    queues,
		logger:    logger,
		timeout:   queueScrapeTimeout,
		dlq: prometheus.NewDesc(MetricDLQTasks,
			"Archived tasks (the dead letter queue), by queue.", []string{"queue"}, nil),
		depth: prometheus.NewDesc(MetricQueueDepth,
			"Tasks in a queue, by state (pending, active, scheduled, retry, archived).", []string{"queue", "state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.dlq
	ch <- c.depth
}

// Collect implements prometheus.Collector. It reads the queues one after
// the other, so no read outlives the scrape.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	deadline := time.Now().Add(c.timeout)
	known, err := c.inspector.Queues()
	if err != nil {
		c.logger.Warn("queue metrics not collected", "err", err)
		return
	}
	queues := c.queues
	if queues == nil {
		queues = slices.Sorted(slices.Values(known))
	}
	for i, q := range queues {
		if time.Now().After(deadline) {
			c.logger.Warn("queue metrics cut short", "timeout", c.timeout.String(), "skipped", queues[i:])
			return
		}
		var info asynq.QueueInfo // a queue asynq has not seen: all 0
		if slices.Contains(known, q) {
			qi, err := c.inspector.GetQueueInfo(q)
			if err != nil {
				c.logger.Warn("queue metrics not collected", "queue", q, "err", err)
				continue
			}
			info = *qi
		}
		ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(info.Archived), q)
		for _, s := range []struct {
			state string
			n     int
		}{
			{"pending", info.Pending},
			{"active", info.Active},
			{"scheduled", info.Scheduled},
			{"retry", info.Retry},
			{"archived", info.Archived},
		} {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(s.n), q, s.state)
		}
	}
}
