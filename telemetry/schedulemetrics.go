package telemetry

import "github.com/prometheus/client_golang/prometheus"

// MetricScheduleMissed counts the slots of recurring schedules recorded
// as missed, by schedule (tenant/id).
const MetricScheduleMissed = "idemgate_schedule_missed_total"

// ScheduleMetrics counts what the scheduler records.
type ScheduleMetrics struct {
	missed *prometheus.CounterVec
}

// NewScheduleMetrics registers the schedules' series on reg.
func NewScheduleMetrics(reg prometheus.Registerer) *ScheduleMetrics {
	m := &ScheduleMetrics{missed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricScheduleMissed,
		Help: "Slots of recurring schedules found too late to fire and recorded as missed, by schedule (tenant/id).",
	}, []string{"schedule"})}
	reg.MustRegister(m.missed)
	return m
}

// Missed counts n slots of schedule recorded as missed: a
// job.SchedulerOptions.Missed.
func (m *ScheduleMetrics) Missed(schedule string, n int) {
	m.missed.WithLabelValues(schedule).Add(float64(n))
}
