package telemetry_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/telemetry"
)

func TestNotificationDedupCounts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewWorkerMetrics(reg)
	if got := series(t, reg)[telemetry.MetricNotificationDedup+"{result=hit}"]; got != 0 {
		t.Fatalf("hit series before any look-up: %v, want 0 (present)", got)
	}
	m.NotificationDedup(true)
	m.NotificationDedup(false)
	m.NotificationDedup(false)
	s := series(t, reg)
	if s[telemetry.MetricNotificationDedup+"{result=hit}"] != 1 || s[telemetry.MetricNotificationDedup+"{result=miss}"] != 2 {
		t.Fatalf("dedup series %v, want hit 1, miss 2", s)
	}
}
