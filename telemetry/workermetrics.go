package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
)

// WorkerMetrics counts the worker framework's events in Prometheus. It
// implements workers.Observer: set it as workers.Deps.Observer.
type WorkerMetrics struct {
	lockAcquire *prometheus.CounterVec
	renewals    prometheus.Counter
	lost        prometheus.Counter
	fencing     prometheus.Counter
	jobs        *prometheus.CounterVec
	attempts    *prometheus.CounterVec
	replays     *prometheus.CounterVec
	records     *prometheus.CounterVec
	*limitMetrics
	*pauseMetrics
}

// NewWorkerMetrics registers the worker's series on reg. It panics if reg
// already has them: that is a wiring mistake, found at start-up. Call
// InitTasks with the task kinds the worker serves so their series start
// at 0 too.
//
// Every label value the worker framework reports (workers.LockResults,
// workers.ErrorClasses, workers.FinishedStatuses) has its series at 0 from
// the start: an alert on increase() sees the first event only if the
// series was there before it.
func NewWorkerMetrics(reg prometheus.Registerer) *WorkerMetrics {
	m := &WorkerMetrics{
		lockAcquire: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLockAcquire,
			Help: "Attempts to take a resource lock, by result (acquired, busy, error).",
		}, []string{"result"}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLockRenewals,
			Help: "Successful lock lease renewals.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLockLost,
			Help: "Lock leases lost while their job was running.",
		}),
		fencing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricFencingRejections,
			Help: "Writes refused because their fencing token was stale.",
		}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricJobs,
			Help: "Jobs that reached a final status, by task and status (succeeded, failed).",
		}, []string{"task", "status"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricJobAttempts,
			Help: "Attempts that did not succeed, by task and error class (transient, permanent, unavailable, lock_busy, stale_token, cancelled, limited, job_gone).",
		}, []string{"task", "error_class"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricJobReplays,
			Help: "Deliveries of an already succeeded job, acked without running it again.",
		}, []string{"task"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRecordRetries,
			Help: "Retries of recording a succeeded effect after the store failed, instead of running the effect again.",
		}, []string{"task"}),
	}
	reg.MustRegister(m.lockAcquire, m.renewals, m.lost, m.fencing, m.jobs, m.attempts, m.replays, m.records)
	m.limitMetrics = newLimitMetrics(reg)
	m.pauseMetrics = newPauseMetrics(reg)
	for _, r := range workers.LockResults() {
		m.lockAcquire.WithLabelValues(r)
	}
	return m
}

// InitTasks creates the series of each task kind at 0: jobs by final
// status, attempts by error class, replays, record retries.
func (m *WorkerMetrics) InitTasks(kinds ...string) {
	for _, k := range kinds {
		for _, s := range workers.FinishedStatuses() {
			m.jobs.WithLabelValues(k, string(s))
		}
		for _, c := range workers.ErrorClasses() {
			m.attempts.WithLabelValues(k, c)
		}
		m.replays.WithLabelValues(k)
		m.records.WithLabelValues(k)
	}
}

// LockAcquire counts one attempt to take a resource lock.
func (m *WorkerMetrics) LockAcquire(result string) { m.lockAcquire.WithLabelValues(result).Inc() }

// LockRenewed counts a lease renewal.
func (m *WorkerMetrics) LockRenewed() { m.renewals.Inc() }

// LockLost counts a lease lost while its job ran.
func (m *WorkerMetrics) LockLost() { m.lost.Inc() }

// FencingRejected counts a write refused for a stale token.
func (m *WorkerMetrics) FencingRejected() { m.fencing.Inc() }

// Attempt counts an attempt that did not succeed.
func (m *WorkerMetrics) Attempt(task, errorClass string) {
	m.attempts.WithLabelValues(task, errorClass).Inc()
}

// JobReplay counts a duplicate delivery absorbed.
func (m *WorkerMetrics) JobReplay(task string) { m.replays.WithLabelValues(task).Inc() }

// RecordRetried counts one more try at recording a succeeded effect.
func (m *WorkerMetrics) RecordRetried(task string) { m.records.WithLabelValues(task).Inc() }

// JobFinished counts a job reaching a final status.
func (m *WorkerMetrics) JobFinished(task string, status job.Status) {
	m.jobs.WithLabelValues(task, string(status)).Inc()
}
