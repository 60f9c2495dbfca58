package telemetry_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/telemetry"
)

func TestLimitMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewWorkerMetrics(reg)
	m.InitLimits("ship-api")
	got := series(t, reg)
	for _, s := range []string{
		"idemgate_limit_waits_total{limit=ship-api,reason=concurrency}",
		"idemgate_limit_waits_total{limit=ship-api,reason=rate}",
		"idemgate_limit_holders{limit=ship-api}",
	} {
		if v, ok := got[s]; !ok || v != 0 {
			t.Errorf("%s = %v, %v; want a series at 0 from the start", s, v, ok)
		}
	}

	m.LimitWaited("ship-api", "rate", 40*time.Millisecond)
	m.LimitWaited("ship-api", "concurrency", 2*time.Second)
	m.LimitHeld("ship-api", +1)
	m.LimitHeld("ship-api", +1)
	m.LimitHeld("ship-api", -1)
	got = series(t, reg)
	if got["idemgate_limit_waits_total{limit=ship-api,reason=rate}"] != 1 || got["idemgate_limit_holders{limit=ship-api}"] != 1 {
		t.Errorf("series after one rate wait and one slot held: %v", got)
	}
	if n := testutil.CollectAndCount(reg, telemetry.MetricLimitWait); n != 1 {
		t.Errorf("%s has %d series, want one per limit", telemetry.MetricLimitWait, n)
	}
}
