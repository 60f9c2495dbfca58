package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// A scheduled job: not_before is the database's now() plus the delay,
// taken once, in the insert; the job is recorded scheduled and its task
// waits in asynq for that time (rounded up to asynq's whole second), with
// not_before in its headers. Submitting it again, with any schedule,
// moves nothing.
func TestSubmitScheduled(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	body := `{"order_id":"o-s","amount_cents":100,"currency":"EUR"}`
	req := v.req("sched", body)
	req.Schedule = job.ScheduleAfter(time.Hour)
	j, err := v.e.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != job.StatusScheduled || j.NotBefore == nil || !j.NotBefore.Equal(j.CreatedAt.Add(time.Hour)) {
		t.Fatalf("job %+v (not_before %v), want scheduled at created_at + 1h", j, j.NotBefore)
	}
	info := v.task(t, j.ID)
	if info == nil || info.State != asynq.TaskStateScheduled || !info.NextProcessAt.Equal(job.ProcessAt(*j.NotBefore)) {
		t.Fatalf("task %+v, want scheduled for %s", info, job.ProcessAt(*j.NotBefore))
	}
	if got := info.Headers[job.HeaderNotBefore]; got != j.NotBefore.UTC().Format(time.RFC3339Nano) {
		t.Errorf("task header %s = %q, want the job's not_before", job.HeaderNotBefore, got)
	}
	for _, again := range []job.Schedule{job.ScheduleAfter(3 * time.Hour), job.ScheduleAfter(0), {}} {
		req.Schedule = again
		got, err := v.e.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != job.StatusScheduled || got.NotBefore == nil || !got.NotBefore.Equal(*j.NotBefore) {
			t.Fatalf("submitted again: job %+v, want the first not_before %s", got, j.NotBefore)
		}
	}
}

// A time past runs the job at once (queued, its task pending) and shows
// the time asked; a job's own Delay applies when the request gives no
// schedule, and an explicit zero delay overrides it.
func TestSubmitScheduleAtOnce(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	spec := invoiceSpec("invoice.create")
	spec.Delay = 10 * time.Minute
	submit := func(key string, sc job.Schedule) job.Row {
		t.Helper()
		j, err := v.e.Submit(ctx, job.Request{Tenant: "acme", Route: "invoices", Key: key, Spec: spec, Queue: v.queue,
			Body: []byte(`{"order_id":"` + key + `","amount_cents":100,"currency":"EUR"}`), Schedule: sc})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	j := submit("past", job.ScheduleAt(past))
	if j.Status != job.StatusQueued || j.NotBefore == nil || !j.NotBefore.Equal(past) {
		t.Errorf("a time past: job %+v (not_before %v), want queued with not_before %s", j, j.NotBefore, past)
	}
	if info := v.task(t, j.ID); info == nil || info.State != asynq.TaskStatePending {
		t.Errorf("a time past: task %+v, want pending", info)
	}
	j = submit("default", job.Schedule{})
	if j.Status != job.StatusScheduled || j.NotBefore == nil || !j.NotBefore.Equal(j.CreatedAt.Add(10*time.Minute)) {
		t.Errorf("no schedule, the job's delay 10m: job %+v (not_before %v)", j, j.NotBefore)
	}
	j = submit("now", job.ScheduleAfter(0))
	if j.Status != job.StatusQueued || j.NotBefore != nil {
		t.Errorf("Idemgate-Delay: 0 over the job's delay: job %+v (not_before %v), want queued at once", j, j.NotBefore)
	}
	if info := v.task(t, j.ID); info == nil || info.State != asynq.TaskStatePending {
		t.Errorf("delay 0: task %+v, want pending", info)
	}
}

// The job document of a scheduled job reads queued once its time has
// come, whether or not a worker took it yet.
func TestScheduledReadsQueuedWhenDue(t *testing.T) {
	v := setup(t)
	req := v.req("due", `{"order_id":"o-d","amount_cents":100,"currency":"EUR"}`)
	req.Schedule = job.ScheduleAfter(time.Hour)
	j, err := v.e.Submit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	v.exec(t, `UPDATE jobs SET not_before = now() - interval '1 second' WHERE id = $1`, j.ID)
	got, err := v.e.Get(t.Context(), "acme", j.ID)
	if err != nil || got.Status != job.StatusQueued {
		t.Fatalf("a due scheduled job reads %q (%v), want queued", got.Status, err)
	}
}

// The relay finds a scheduled job whose task the broker lost and enqueues
// it again for its time, not at once.
func TestRelayRequeuesScheduledAtItsTime(t *testing.T) {
	v := setup(t)
	req := v.req("lost", `{"order_id":"o-l","amount_cents":100,"currency":"EUR"}`)
	req.Schedule = job.ScheduleAfter(2 * time.Hour)
	j, err := v.e.Submit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	v.forget(t, j.ID)
	v.age(t, []string{j.ID})
	p, err := job.NewRelay(v.e, v.inspector, job.RelayOptions{}).Pass(t.Context())
	if err != nil || len(p.Requeued) != 1 {
		t.Fatalf("relay pass %+v, %v: want the scheduled job's task requeued", p, err)
	}
	info := v.task(t, j.ID)
	if info == nil || info.State != asynq.TaskStateScheduled || !info.NextProcessAt.Equal(job.ProcessAt(*j.NotBefore)) {
		t.Fatalf("requeued task %+v, want scheduled for %s", info, job.ProcessAt(*j.NotBefore))
	}
}

func TestCheckSchedule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 8, 0, 0, 0, time.UTC)
	spec := invoiceSpec("invoice.create")
	short := invoiceSpec("invoice.create")
	short.MaxDelay = time.Hour
	short.Delay = 2 * time.Hour // a default beyond the bound is refused too
	for _, tc := range []struct {
		name string
		spec *job.Spec
		sc   job.Schedule
		ok   bool
	}{
		{"no schedule", spec, job.Schedule{}, true},
		{"at the default bound", spec, job.ScheduleAfter(job.DefaultMaxDelay), true},
		{"past the default bound", spec, job.ScheduleAfter(job.DefaultMaxDelay + time.Second), false},
		{"a time within", spec, job.ScheduleAt(now.Add(24 * time.Hour)), true},
		{"a time beyond", spec, job.ScheduleAt(now.Add(job.DefaultMaxDelay + time.Minute)), false},
		{"a time past", spec, job.ScheduleAt(now.Add(-1000 * time.Hour)), true},
		{"within its own bound", short, job.ScheduleAfter(time.Hour), true},
		{"beyond its own bound", short, job.ScheduleAfter(time.Hour + time.Second), false},
		{"its own delay beyond its bound", short, job.Schedule{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.CheckSchedule(tc.sc, now)
			if tc.ok {
				if err != nil {
					t.Fatalf("CheckSchedule = %v, want nil", err)
				}
				return
			}
			want := tc.spec.MaxDelay
			if want == 0 {
				want = job.DefaultMaxDelay
			}
			var se *job.ScheduleError
			if !errors.Is(err, job.ErrScheduleOutOfRange) || !errors.As(err, &se) || se.Max != want ||
				!strings.Contains(err.Error(), "at most "+want.String()+" ahead") {
				t.Fatalf("CheckSchedule = %v, want a *ScheduleError naming the maximum %s", err, want)
			}
		})
	}
}

// Spec.NotBefore is what the insert computes, on a given clock, for
// stand-ins of the job store.
func TestSpecNotBefore(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 8, 0, 0, 0, time.UTC)
	spec := invoiceSpec("invoice.create")
	delayed := invoiceSpec("invoice.create")
	delayed.Delay = time.Minute
	at := now.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		spec *job.Spec
		sc   job.Schedule
		want *time.Time
	}{
		{"at once", spec, job.Schedule{}, nil},
		{"a delay", spec, job.ScheduleAfter(time.Hour), new(now.Add(time.Hour))},
		{"a time", spec, job.ScheduleAt(at), &at},
		{"the job's delay", delayed, job.Schedule{}, new(now.Add(time.Minute))},
		{"zero over the job's delay", delayed, job.ScheduleAfter(0), nil},
	} {
		got := tc.spec.NotBefore(tc.sc, now)
		if (got == nil) != (tc.want == nil) || (got != nil && !got.Equal(*tc.want)) {
			t.Errorf("%s: NotBefore = %v, want %v", tc.name, got, tc.want)
		}
	}
}
