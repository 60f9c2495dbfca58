package job_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

func (v env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := v.pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// submit accepts n invoice jobs and returns their ids, oldest first.
func (v env) submit(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		body := fmt.Sprintf(`{"order_id":"o-%d","amount_cents":100,"currency":"EUR"}`, i)
		j, err := v.e.Submit(t.Context(), v.req(fmt.Sprintf("k%d", i), body))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

// forget deletes the tasks of ids, as a broker restart would.
func (v env) forget(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := v.inspector.DeleteTask(v.queue, id); err != nil {
			t.Fatalf("delete task %s: %v", id, err)
		}
	}
}

// age makes every job's record look unchanged for an hour, the oldest
// (the first submitted) oldest.
func (v env) age(t *testing.T, ids []string) {
	t.Helper()
	for i, id := range ids {
		v.exec(t, `UPDATE jobs SET updated_at = now() - interval '1 hour' - make_interval(secs => $2) WHERE id = $1`, id, len(ids)-i)
	}
}

// task returns the task asynq holds for id, or nil.
func (v env) task(t *testing.T, id string) *asynq.TaskInfo {
	t.Helper()
	info, err := v.inspector.GetTaskInfo(v.queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A broker that lost tasks: the relay enqueues again exactly the missing
// tasks of unfinished jobs, as Submit enqueued them, once, even with two
// relays at it at once; a finished job is left alone.
func TestRelayEnqueuesLostTasks(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 6)
	original := v.task(t, ids[0])
	// ids[3] keeps its task.
	lost, succeeded, failed := ids[:3], ids[4], ids[5]
	if err := v.e.Records().SetStatus(ctx, succeeded, "succeeded", 1, "inv_1", ""); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Records().SetStatus(ctx, failed, "failed", 3, "", "boom"); err != nil {
		t.Fatal(err)
	}
	v.exec(t, `UPDATE jobs SET status = 'retrying' WHERE id = $1`, lost[1])
	v.forget(t, append([]string{succeeded, failed}, lost...)...)

	// Within the grace period nothing is checked: the gateway may be
	// enqueueing it right now.
	if p, err := job.NewRelay(v.e, v.inspector, job.RelayOptions{}).Pass(ctx); err != nil || p.Checked != 0 || len(p.Requeued) != 0 {
		t.Fatalf("pass within the grace period: %+v %v", p, err)
	}

	v.age(t, ids)
	var (
		wg     sync.WaitGroup
		passes [2]job.Pass
		logs   [2]bytes.Buffer
		errs   [2]error
	)
	for i := range passes {
		r := job.NewRelay(v.e, v.inspector, job.RelayOptions{Logger: slog.New(slog.NewTextHandler(&logs[i], nil))})
		wg.Go(func() { passes[i], errs[i] = r.Pass(ctx) })
	}
	wg.Wait()
	var requeued []string
	for i, p := range passes {
		if errs[i] != nil {
			t.Fatalf("pass %d: %v", i, errs[i])
		}
		if p.Checked != 4 {
			t.Errorf("pass %d checked %d jobs, want the 4 unfinished ones", i, p.Checked)
		}
		for _, id := range p.Requeued {
			if !strings.Contains(logs[i].String(), "job_id="+id) {
				t.Errorf("pass %d re-enqueued %s without a log line naming it:\n%s", i, id, logs[i].String())
			}
		}
		requeued = append(requeued, p.Requeued...)
	}
	slices.Sort(requeued)
	if want := slices.Sorted(slices.Values(lost)); !slices.Equal(requeued, want) {
		t.Fatalf("the two passes re-enqueued %q, want each of %q once", requeued, want)
	}
	for _, id := range lost {
		info := v.task(t, id)
		if info == nil {
			t.Fatalf("task of %s still missing", id)
		}
		if info.Type != original.Type || info.Queue != v.queue || info.MaxRetry != job.MaxRetry ||
			info.Headers[job.HeaderID] != id || info.Headers[job.HeaderTenant] != "acme" {
			t.Errorf("re-enqueued task %+v differs from what Submit enqueues", info)
		}
	}
	if !bytes.Equal(v.task(t, lost[0]).Payload, original.Payload) {
		t.Errorf("re-enqueued payload %s, want %s", v.task(t, lost[0]).Payload, original.Payload)
	}
	for _, id := range []string{succeeded, failed} {
		if v.task(t, id) != nil {
			t.Errorf("a finished job's task (%s) was enqueued again", id)
		}
	}
	if n := len(v.pending(t)); n != 4 {
		t.Errorf("%d pending tasks, want 4: one per unfinished job", n)
	}
	// Nothing is missing any more.
	if p, err := job.NewRelay(v.e, v.inspector, job.RelayOptions{}).Pass(ctx); err != nil || p.Checked != 4 || len(p.Requeued) != 0 {
		t.Fatalf("a pass with every task present: %+v %v", p, err)
	}
}

// A pass reads a bounded batch and the next one continues after it, so
// old jobs whose tasks are only waiting cannot hide a missing one.
func TestRelayBatchesReachEveryJob(t *testing.T) {
	v := setup(t)
	ids := v.submit(t, 5)
	v.age(t, ids)
	v.forget(t, ids[4]) // the newest: behind a batch of present tasks
	r := job.NewRelay(v.e, v.inspector, job.RelayOptions{Batch: 2})
	var checked []int
	var requeued []string
	for range 3 {
		p, err := r.Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		checked = append(checked, p.Checked)
		requeued = append(requeued, p.Requeued...)
	}
	if !slices.Equal(checked, []int{2, 2, 1}) || !slices.Equal(requeued, ids[4:]) {
		t.Fatalf("passes checked %v and re-enqueued %q; want batches of 2 reaching the newest job, %s", checked, requeued, ids[4])
	}
	// After the last job the relay starts again from the oldest.
	v.forget(t, ids[0])
	p, err := r.Pass(t.Context())
	if err != nil || !slices.Equal(p.Requeued, ids[:1]) {
		t.Fatalf("pass after a full round: %+v %v, want the oldest re-enqueued", p, err)
	}
}

// Requeue is the operator's way: whatever the age of the record.
func TestRequeue(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	ids := v.submit(t, 3)
	r := job.NewRelay(v.e, v.inspector, job.RelayOptions{})
	if _, sent, err := r.Requeue(ctx, ids[0]); err != nil || sent {
		t.Fatalf("requeue with the task present: sent %v, %v", sent, err)
	}
	v.forget(t, ids[0])
	if j, sent, err := r.Requeue(ctx, ids[0]); err != nil || !sent || j.ID != ids[0] || v.task(t, ids[0]) == nil {
		t.Fatalf("requeue of a lost task: sent %v, %v", sent, err)
	}
	if err := v.e.Records().SetStatus(ctx, ids[1], "succeeded", 1, "inv_1", ""); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Records().SetStatus(ctx, ids[2], "failed", 1, "", "boom"); err != nil {
		t.Fatal(err)
	}
	v.forget(t, ids[1], ids[2])
	for _, id := range ids[1:] {
		if j, sent, err := r.Requeue(ctx, id); !errors.Is(err, job.ErrFinished) || sent || j.ID != id || v.task(t, id) != nil {
			t.Errorf("requeue of %s job: %+v sent %v, %v; want ErrFinished and nothing enqueued", j.Status, j, sent, err)
		}
	}
	if _, _, err := r.Requeue(ctx, "job_nope"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("requeue of an unknown job: %v", err)
	}
}

// The gateway accepted a job whose enqueue failed: the relay delivers it.
func TestRelayDeliversADeferredTask(t *testing.T) {
	v := setup(t)
	dead := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: 200e6})
	t.Cleanup(func() { _ = dead.Close() })
	j, err := job.NewSubmitter(v.pool, dead).Submit(t.Context(), v.req("late", `{"order_id":"o-1","amount_cents":1,"currency":"EUR"}`))
	if !errors.Is(err, job.ErrTaskDeferred) || j.ID == "" {
		t.Fatalf("submit with the queue down: %+v %v", j, err)
	}
	v.age(t, []string{j.ID})
	p, err := job.NewRelay(v.e, v.inspector, job.RelayOptions{}).Pass(t.Context())
	if err != nil || !slices.Equal(p.Requeued, []string{j.ID}) || v.task(t, j.ID) == nil {
		t.Fatalf("relay pass: %+v %v, want the deferred task enqueued", p, err)
	}
}

// failingInspector fails to look up one task, as a broken connection would.
type failingInspector struct {
	job.TaskInspector
	id string
}

func (f failingInspector) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) {
	if id == f.id {
		return nil, errors.New("connection reset")
	}
	return f.TaskInspector.GetTaskInfo(queue, id)
}

// A job whose task cannot be looked up or enqueued fails the pass, and the
// next pass goes on after it: one bad job does not hold back the others.
func TestRelayGoesOnAfterAFailure(t *testing.T) {
	v := setup(t)
	ids := v.submit(t, 3)
	v.age(t, ids)
	v.forget(t, ids...)
	r := job.NewRelay(v.e, failingInspector{v.inspector, ids[0]}, job.RelayOptions{})
	p, err := r.Pass(t.Context())
	if err == nil || !strings.Contains(err.Error(), ids[0]) || len(p.Requeued) != 0 {
		t.Fatalf("pass with the oldest job failing: %+v %v, want an error naming it", p, err)
	}
	p, err = r.Pass(t.Context())
	if err != nil || !slices.Equal(p.Requeued, ids[1:]) {
		t.Fatalf("the next pass: %+v %v, want the jobs after the failed one re-enqueued", p, err)
	}
}
