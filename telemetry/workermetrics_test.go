package telemetry_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/telemetry"
	"github.com/idemgate/idemgate/workers"
)

var _ workers.Observer = (*telemetry.WorkerMetrics)(nil)

// series returns every sample on reg as "name{k=v,…}" → value.
func series(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

func TestWorkerMetricsSeriesExistAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewWorkerMetrics(reg)
	m.InitTasks("invoice.create")
	task := "task=" + "invoice.create"
	var want []string
	for _, r := range []string{workers.LockAcquired, workers.LockBusy, workers.LockError} {
		want = append(want, "idemgate_lock_acquire_total{result="+r+"}")
	}
	want = append(want,
		"idemgate_lock_renewals_total{}", "idemgate_lock_lost_total{}", "idemgate_fencing_rejections_total{}",
		"idemgate_job_replays_total{"+task+"}", "idemgate_job_record_retries_total{"+task+"}")
	for _, s := range []job.Status{job.StatusSucceeded, job.StatusFailed, job.StatusCancelled} {
		want = append(want, "idemgate_jobs_total{status="+string(s)+","+task+"}")
	}
	for _, c := range []string{workers.ClassTransient, workers.ClassPermanent, workers.ClassUnavailable, workers.ClassLockBusy, workers.ClassStaleToken, workers.ClassCancelled, workers.ClassLimited, workers.ClassJobGone, workers.ClassSuperseded} {
		want = append(want, "idemgate_job_attempts_total{error_class="+c+","+task+"}")
	}
	got := series(t, reg)
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(slices.Values(want)); !slices.Equal(g, w) {
		t.Fatalf("series before any event:\n got %q\nwant %q", g, w)
	}
	for name, v := range got {
		if v != 0 {
			t.Errorf("%s = %v before any event, want 0", name, v)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestWorkerMetricsCountEachEvent(t *testing.T) {
	t.Parallel()
	const task = "payment.charge"
	tests := []struct {
		name  string
		event func(o workers.Observer)
		want  map[string]float64 // the series that move, by how much
	}{
		{"lock acquired", func(o workers.Observer) { o.LockAcquire(workers.LockAcquired) },
			map[string]float64{"idemgate_lock_acquire_total{result=acquired}": 1}},
		{"lock busy twice", func(o workers.Observer) { o.LockAcquire(workers.LockBusy); o.LockAcquire(workers.LockBusy) },
			map[string]float64{"idemgate_lock_acquire_total{result=busy}": 2}},
		{"lock error", func(o workers.Observer) { o.LockAcquire(workers.LockError) },
			map[string]float64{"idemgate_lock_acquire_total{result=error}": 1}},
		{"renewals", func(o workers.Observer) { o.LockRenewed(); o.LockRenewed(); o.LockRenewed() },
			map[string]float64{"idemgate_lock_renewals_total{}": 3}},
		{"lock lost", func(o workers.Observer) { o.LockLost() },
			map[string]float64{"idemgate_lock_lost_total{}": 1}},
		{"fencing rejected", func(o workers.Observer) { o.FencingRejected() },
			map[string]float64{"idemgate_fencing_rejections_total{}": 1}},
		{"transient attempt", func(o workers.Observer) { o.Attempt(task, workers.ClassTransient) },
			map[string]float64{"idemgate_job_attempts_total{error_class=transient,task=payment.charge}": 1}},
		{"permanent attempt", func(o workers.Observer) { o.Attempt(task, workers.ClassPermanent) },
			map[string]float64{"idemgate_job_attempts_total{error_class=permanent,task=payment.charge}": 1}},
		{"unavailable attempt", func(o workers.Observer) { o.Attempt(task, workers.ClassUnavailable) },
			map[string]float64{"idemgate_job_attempts_total{error_class=unavailable,task=payment.charge}": 1}},
		{"lock busy attempt", func(o workers.Observer) { o.Attempt(task, workers.ClassLockBusy) },
			map[string]float64{"idemgate_job_attempts_total{error_class=lock_busy,task=payment.charge}": 1}},
		{"stale token attempt", func(o workers.Observer) { o.Attempt(task, workers.ClassStaleToken) },
			map[string]float64{"idemgate_job_attempts_total{error_class=stale_token,task=payment.charge}": 1}},
		{"replay", func(o workers.Observer) { o.JobReplay(task) },
			map[string]float64{"idemgate_job_replays_total{task=payment.charge}": 1}},
		{"record retried", func(o workers.Observer) { o.RecordRetried(task); o.RecordRetried(task) },
			map[string]float64{"idemgate_job_record_retries_total{task=payment.charge}": 2}},
		{"succeeded", func(o workers.Observer) { o.JobFinished(task, job.StatusSucceeded) },
			map[string]float64{"idemgate_jobs_total{status=succeeded,task=payment.charge}": 1}},
		{"failed", func(o workers.Observer) { o.JobFinished(task, job.StatusFailed) },
			map[string]float64{"idemgate_jobs_total{status=failed,task=payment.charge}": 1}},
		{"a task not initialised", func(o workers.Observer) { o.JobReplay("report.build") },
			map[string]float64{"idemgate_job_replays_total{task=report.build}": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := telemetry.NewWorkerMetrics(reg)
			m.InitTasks(task)
			before := series(t, reg)
			tt.event(m)
			after := series(t, reg)
			moved := map[string]float64{}
			for name, v := range after {
				if d := v - before[name]; d != 0 {
					moved[name] = d
				}
			}
			if !maps.Equal(moved, tt.want) {
				t.Errorf("moved %v, want %v", moved, tt.want)
			}
		})
	}
}

func TestWorkerMetricsRegisterTwicePanics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewWorkerMetrics(reg)
	defer func() {
		if recover() == nil {
			t.Error("a second NewWorkerMetrics on one registry did not panic")
		}
	}()
	telemetry.NewWorkerMetrics(reg)
}

func TestWorkerMetricNamesAreListed(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewWorkerMetrics(reg).InitTasks("x.y")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := telemetry.MetricNames()
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			t.Errorf("%s is exposed but not in MetricNames", f.GetName())
		}
	}
}
