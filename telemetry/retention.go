package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
)

// MetricRetentionDeleted counts the rows the worker's retention janitor
// deleted, by table: jobs (final jobs past jobs_retention, each with its
// ledger), job_executions (final executions past executions_retention)
// job_attempts (ledger rows of tasks that ran without a job) and
// admin_actions (the operators' audit trail past jobs_retention). The
// idempotency records' janitor is apart: it runs in the gateway.
const MetricRetentionDeleted = "idemgate_retention_deleted_total"

// RetentionTables are the label values of MetricRetentionDeleted.
func RetentionTables() []string {
	return []string{"jobs", "job_executions", "job_attempts", "admin_actions"}
}

// RetentionMetrics counts what the retention janitor deletes.
type RetentionMetrics struct{ deleted *prometheus.CounterVec }

// NewRetentionMetrics registers MetricRetentionDeleted on reg, every table's
// series at 0. It panics if reg already has it.
func NewRetentionMetrics(reg prometheus.Registerer) *RetentionMetrics {
	m := &RetentionMetrics{deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRetentionDeleted,
		Help: "Rows the retention janitor deleted, by table (jobs, job_executions, job_attempts, admin_actions).",
	}, []string{"table"})}
	reg.MustRegister(m.deleted)
	for _, t := range RetentionTables() {
		m.deleted.WithLabelValues(t)
	}
	return m
}

// Deleted counts n rows deleted from table.
func (m *RetentionMetrics) Deleted(table string, n int) {
	if m != nil && n > 0 {
		m.deleted.WithLabelValues(table).Add(float64(n))
	}
}

// MetricFinalCallbacks counts the recorded attempts of final-status
// callbacks (on_final), by task and outcome: delivered, retry (another
// attempt is due) or abandoned (the bound is reached; alert on it).
const MetricFinalCallbacks = "idemgate_final_callbacks_total"

// CallbackMetrics counts final-status callback attempts. It implements
// workers.CallbackObserver.
type CallbackMetrics struct{ attempts *prometheus.CounterVec }

var _ workers.CallbackObserver = (*CallbackMetrics)(nil)

// NewCallbackMetrics registers MetricFinalCallbacks on reg, each outcome's
// series of each of tasks at 0. It panics if reg already has it.
func NewCallbackMetrics(reg prometheus.Registerer, tasks ...string) *CallbackMetrics {
	m := &CallbackMetrics{attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricFinalCallbacks,
		Help: "Final-status callback attempts, by task and outcome (delivered, retry, abandoned).",
	}, []string{"task", "outcome"})}
	reg.MustRegister(m.attempts)
	for _, t := range tasks {
		for _, o := range []job.CallbackOutcome{job.CallbackDelivered, job.CallbackRetry, job.CallbackAbandoned} {
			m.attempts.WithLabelValues(t, string(o))
		}
	}
	return m
}

// CallbackAttempt counts one attempt of task's callback.
func (m *CallbackMetrics) CallbackAttempt(task string, outcome job.CallbackOutcome) {
	m.attempts.WithLabelValues(task, string(outcome)).Inc()
}
