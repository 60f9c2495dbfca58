package job_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// batchOf is a batch of n invoice jobs keyed b0…, the keys of its items
// k0….
func (v env) batchOf(n int) job.Batch {
	b := job.Batch{Tenant: "acme", Route: "invoices:batch", Key: "batch-1", Items: n}
	for i := range n {
		b.Requests = append(b.Requests, v.req(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"order_id":"o-%d","amount_cents":100,"currency":"EUR"}`, i)))
	}
	return b
}

// A batch records its jobs and the batch in one transaction and then
// sends their tasks; submitted again, it records and sends nothing new,
// and GET /v1/batches/{id}'s counts cover every job.
func TestSubmitBatchRecordsThenSends(t *testing.T) {
	v := setup(t)
	ctx := t.Context()
	b := v.batchOf(40)
	recs, err := v.e.SubmitBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 40 {
		t.Fatalf("%d jobs, want 40", len(recs))
	}
	for i, r := range recs {
		if want := job.ID("acme", "invoices", fmt.Sprintf("k%d", i)); r.ID != want || r.Status != job.StatusQueued {
			t.Fatalf("job %d: %s %s, want %s queued", i, r.ID, r.Status, want)
		}
		if v.task(t, r.ID) == nil {
			t.Fatalf("job %d: no task", i)
		}
	}
	again, err := v.e.SubmitBatch(ctx, b)
	if err != nil || len(again) != 40 || again[7].ID != recs[7].ID || !again[7].CreatedAt.Equal(recs[7].CreatedAt) {
		t.Fatalf("again: %v, %d jobs", err, len(again))
	}
	var n int
	if err := v.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE batch_id = $1`, b.ID()).Scan(&n); err != nil || n != 40 {
		t.Fatalf("%d jobs name the batch (%v), want 40", n, err)
	}
	if q, err := v.inspector.GetQueueInfo(v.queue); err != nil || q.Pending != 40 {
		t.Fatalf("queue: %+v, %v; want 40 tasks pending", q, err)
	}
	st, err := v.e.Batch(ctx, "acme", b.ID())
	if err != nil || st.Items != 40 || st.Counts[job.StatusQueued] != 40 || st.Final() {
		t.Fatalf("batch: %+v, %v", st, err)
	}
	if _, err := v.e.Batch(ctx, "other", b.ID()); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant's batch: %v, want not found", err)
	}
}

// A failure between the commit and the sends loses no job: the broker
// stops answering once the jobs are recorded, so SubmitBatch returns every
// recorded job with ErrTaskDeferred, and the relay sends each missing
// task once the broker answers.
func TestSubmitBatchLostSendsAreRelayed(t *testing.T) {
	v := setup(t)
	proxied, proxy := testkit.Proxied(t, testkit.RedisURL(t))
	opt, err := asynq.ParseRedisURI(proxied)
	if err != nil {
		t.Fatal(err)
	}
	cutClient := asynq.NewClient(opt)
	t.Cleanup(func() { _ = cutClient.Close() })
	proxy.Freeze()
	cut := job.NewSubmitter(v.pool, cutClient)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	recs, err := cut.SubmitBatch(ctx, v.batchOf(25))
	if !errors.Is(err, job.ErrTaskDeferred) || len(recs) != 25 {
		t.Fatalf("SubmitBatch with the broker silent: %d jobs, %v; want 25 and ErrTaskDeferred", len(recs), err)
	}
	var ids []string
	for _, r := range recs {
		if v.task(t, r.ID) != nil {
			t.Fatalf("job %s has a task: the broker was down", r.ID)
		}
		ids = append(ids, r.ID)
	}
	v.age(t, ids)
	p, err := job.NewRelay(v.e, v.inspector, job.RelayOptions{}).Pass(t.Context())
	if err != nil || len(p.Requeued) != 25 {
		t.Fatalf("relay: %+v, %v; want the 25 tasks requeued", p, err)
	}
	for _, id := range ids {
		if v.task(t, id) == nil {
			t.Fatalf("job %s: still no task after the relay", id)
		}
	}
}
