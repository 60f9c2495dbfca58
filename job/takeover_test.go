package job_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// probe is a LockProbe whose held resources are listed.
type probe map[string]bool

func (p probe) Held(_ context.Context, resources []string) ([]bool, error) {
	out := make([]bool, len(resources))
	for i, r := range resources {
		out[i] = p[r]
	}
	return out, nil
}

// running makes job id look like an attempt of its worker: processing,
// its execution under token on resource unchanged for age, its latest
// attempt ended with outcome ("" for still open).
func (v env) running(t *testing.T, id, resource string, token int64, age time.Duration, outcome string) {
	t.Helper()
	v.exec(t, `UPDATE jobs SET status = 'processing' WHERE id = $1`, id)
	v.exec(t, `
INSERT INTO job_executions (tenant, key, task, resource, status, attempt_count, fencing_token, updated_at)
SELECT tenant, business_key, task, $2, 'processing', 1, $3, now() - make_interval(secs => $4) FROM jobs WHERE id = $1`,
		id, resource, token, age.Seconds())
	v.exec(t, `
INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, worker, outcome, ended_at)
SELECT id, tenant, business_key, task, $2, 1, $3, 'w1', NULLIF($4, ''), CASE WHEN $4 <> '' THEN now() END FROM jobs WHERE id = $1`,
		id, resource, token, outcome)
}

// The takeover pass enqueues a task, under a TaskID of its own, for each
// processing job whose latest attempt is open or lost its lock, whose
// execution has not changed for a lock TTL and whose lock nobody holds;
// once per lost attempt, however many passes see it. A job whose lock is
// held, whose attempt ended otherwise (it waits for its retry), or whose
// execution is recent is left alone.
func TestTakeOverJobsWhoseLockIsGone(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 5)
	v.forget(t, ids...) // the original tasks are active elsewhere: irrelevant here
	const ttl = 5 * time.Second
	v.running(t, ids[0], "acme/r0", 7, time.Minute, "")          // open, lock gone: taken over
	v.running(t, ids[1], "acme/r1", 3, time.Minute, "lock_lost") // lost its lock: taken over
	v.running(t, ids[2], "acme/r2", 4, time.Minute, "")          // lock held
	v.running(t, ids[3], "acme/r3", 5, time.Minute, "transient") // between attempts
	v.running(t, ids[4], "acme/r4", 6, 0, "")                    // just started
	locks := probe{"acme/r2": true}

	if p, err := job.NewRelay(v.e, v.inspector, job.RelayOptions{}).TakeOver(ctx); err != nil || p.Checked != 0 {
		t.Fatalf("without Locks: %+v, %v; want nothing done", p, err)
	}
	relay := job.NewRelay(v.e, v.inspector, job.RelayOptions{Locks: locks, LockTTL: ttl})
	p, err := relay.TakeOver(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{job.TakeoverTaskID(ids[0], 7), job.TakeoverTaskID(ids[1], 3)}
	if p.Checked != 3 || !slices.Equal(slices.Sorted(slices.Values(p.Enqueued)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("pass = %+v, want 3 checked and %q enqueued", p, want)
	}
	info := v.task(t, want[0])
	if info == nil {
		t.Fatalf("no task %s", want[0])
	}
	rec, err := v.e.Records().ByID(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != rec.Task || string(info.Payload) != string(rec.Payload) ||
		info.Headers[job.HeaderID] != ids[0] || info.Headers[job.HeaderTenant] != "acme" || info.Queue != v.queue {
		t.Fatalf("takeover task = %+v, want the job's own task under another id", info)
	}
	if p, err := relay.TakeOver(ctx); err != nil || len(p.Enqueued) != 0 {
		t.Fatalf("second pass: %+v, %v; want nothing enqueued again", p, err)
	}
}
