package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestMeasureFailover checks the failover columns on hand-made outcomes:
// an answer forgotten and run again, a job delivered twice, errors before
// and after the fault, the recovery and the takeover.
func TestMeasureFailover(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ok := func(id string, s float64) answer { return answer{status: 201, id: id, at: at(s)} }
	res := &loadResult{
		start: t0,
		keys: []keyResult{
			{key: "answered-once", answers: []answer{ok("ch_1", 1)}},
			{key: "forgotten", answers: []answer{ok("ch_2", 2), ok("ch_3", 7)}},
			{key: "rerun-unanswered", answers: []answer{ok("ch_4", 8)}},
			{key: "job-once", job: true, answers: []answer{{status: 202, id: "job_1", at: at(1)}}},
			{key: "job-twice", job: true, answers: []answer{{status: 202, id: "job_2", at: at(1)}}},
		},
		attempts: []call{
			{sent: at(0.5), at: at(1), status: 201},
			{sent: at(2.5), at: at(3), status: 503}, // refused before the fault
			{sent: at(4.5), at: at(5), status: 0},   // the first failure after it
			{sent: at(5.5), at: at(6), status: 503},
			{sent: at(4.8), at: at(6.2), status: 201}, // sent before the failure: not a recovery
			{sent: at(6.5), at: at(7), status: 201},   // the recovery: 2s after the failure
		},
	}
	app := func(token int64, s float64) Application { return Application{Token: token, At: at(s)} }
	applied := map[string][]Application{
		"answered-once":    {app(1, 0.8)},
		"forgotten":        {app(1, 1.8), app(2, 6.5)},
		"rerun-unanswered": {app(1, 3), app(2, 7.5)}, // never answered before its re-run
		"job-once":         {app(1, 2)},
		"job-twice":        {app(1, 3), app(2, 9)}, // taken over 5s after the fault
	}
	r := &Row{Scenario: "pg-failover-sync-lag"}
	r.measureFailover(res, applied, at(4), true)

	got := map[string]int64{
		"answered then re-run": int64(*r.AnsweredThenRerun), "double deliveries": int64(*r.DoubleDeliveries),
		"client errors": int64(r.ClientErrors), "errors before fault": int64(r.ErrorsBeforeFault),
		"error span ms": r.ErrorSpanMS, "recovery ms": *r.RecoveryMS, "takeover ms": *r.TakeoverMS,
	}
	want := map[string]int64{
		"answered then re-run": 1, "double deliveries": 1, "client errors": 3, "errors before fault": 1,
		"error span ms": 3000, "recovery ms": 2000, "takeover ms": 5000,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %d, want %d", k, got[k], w)
		}
	}
	// pg-failover-sync-lag is a recommended deployment: the forgotten
	// answer and the refusal before the fault each break a guarantee.
	broken := strings.Join(check(r), "; ")
	for _, b := range []string{"0 answers forgotten and run again (1)", "0 healthy requests refused before the fault (1)"} {
		if !strings.Contains(broken, b) {
			t.Errorf("broken = %q, want it to name %q", broken, b)
		}
	}
}

// TestRecoveryNeverServed: clients that failed after the fault and were
// never served again have no recovery time.
func TestRecoveryNeverServed(t *testing.T) {
	t0 := time.Now()
	calls := []call{{sent: t0, at: t0.Add(time.Second), status: 503}}
	if ms, ok := recovery(calls, t0); ok {
		t.Errorf("recovery = %dms, want none", ms)
	}
	if ms, ok := recovery(nil, t0); !ok || ms != 0 {
		t.Errorf("recovery without failures = %dms, %v; want 0", ms, ok)
	}
}

// TestSettingsInConfig: a scenario's options land in their sections, and
// only when the binary accepts them.
func TestSettingsInConfig(t *testing.T) {
	c := clusterConfig{
		Settings: []setting{
			{key: "idempotency.redis_wait", value: "{replicas: 1, timeout: 1s}"},
			{key: "jobs_api.redis_wait", value: "{replicas: 1, timeout: 1s}"},
			{key: "worker.unknown_here", value: "1"},
		},
		keys: map[string]bool{"idempotency.redis_wait": true, "jobs_api.redis_wait": true},
	}
	if got := c.In("idempotency"); len(got) != 1 || got[0] != "redis_wait: {replicas: 1, timeout: 1s}" {
		t.Errorf("In(idempotency) = %q", got)
	}
	if got := c.In("worker"); len(got) != 0 {
		t.Errorf("In(worker) = %q, want nothing: the binary does not accept the key", got)
	}
	if got := c.Others(); len(got) != 1 || got[0] != "jobs_api:\n  redis_wait: {replicas: 1, timeout: 1s}" {
		t.Errorf("Others() = %q", got)
	}
}
