package execution_test

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/execution"
)

// TestDeleteFinishedExecutions: the executions retention deletes the
// final executions past it, oldest first and in bounded batches; an
// execution in flight and a recent one stay, and once deleted the same
// business key runs again (the documented trade-off).
func TestDeleteFinishedExecutions(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	take := func(key string) int64 {
		t.Helper()
		rec, err := store.Take(ctx, execution.Attempt{Tenant: "acme", Key: key, Task: "invoice.create", Resource: "acme/" + key})
		if err != nil {
			t.Fatal(err)
		}
		return rec.FencingToken
	}
	if err := store.MarkSucceeded(ctx, "acme", "old-ok", take("old-ok"), "inv-1"); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkFailed(ctx, "acme", "old-failed", take("old-failed"), "declined"); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkCancelled(ctx, "acme", "old-cancelled", take("old-cancelled"), "cancelled"); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkSucceeded(ctx, "acme", "recent", take("recent"), "inv-2"); err != nil {
		t.Fatal(err)
	}
	take("running")
	if _, err := pool.Exec(ctx, `UPDATE job_executions SET finished_at = now() - interval '100 days' + make_interval(secs => CASE key WHEN 'old-ok' THEN 0 ELSE 1 END),
       updated_at = now() - interval '100 days' WHERE key IN ('old-ok', 'old-failed', 'old-cancelled', 'running')`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.DeleteFinished(ctx, execution.DefaultRetention, 1); err != nil || n != 1 {
		t.Fatalf("a batch of 1: deleted %d (%v), want 1", n, err)
	}
	if _, err := store.Get(ctx, "acme", "old-ok"); err == nil {
		t.Error("the oldest execution is still there after the first batch")
	}
	if n, err := store.DeleteFinished(ctx, execution.DefaultRetention, 10); err != nil || n != 2 {
		t.Fatalf("the rest: deleted %d (%v), want 2 (the failed and the cancelled one)", n, err)
	}
	for key, want := range map[string]bool{"old-ok": false, "old-failed": false, "old-cancelled": false, "recent": true, "running": true} {
		_, err := store.Get(ctx, "acme", key)
		if got := err == nil; got != want {
			t.Errorf("%s kept: %v, want %v (%v)", key, got, want, err)
		}
	}
	// Forgotten: the same business key is a new execution.
	if tok := take("old-ok"); tok <= 0 {
		t.Errorf("old-ok taken again with token %d", tok)
	}
	if rec, _ := store.Get(ctx, "acme", "old-ok"); rec.Attempts != 1 {
		t.Errorf("old-ok runs again from attempt %d, want 1", rec.Attempts)
	}
}

// TestDeleteEndedAttemptsOfJobsStay: the executions' ledger janitor leaves
// the rows of a job, which go with the job.
func TestDeleteEndedAttemptsOfJobsStay(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	for _, jobID := range []string{"", "job_1"} {
		a := execution.Attempt{Tenant: "acme", Key: "k-" + jobID, Task: "invoice.create", Resource: "acme/r", JobID: jobID}
		rec, err := store.Take(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.MarkSucceeded(ctx, "acme", a.Key, rec.FencingToken, "ref"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE job_attempts SET started_at = started_at - interval '100 days', ended_at = ended_at - interval '100 days'`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.DeleteEndedAttempts(ctx, execution.DefaultRetention, 10); err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want 1: the row without a job", n, err)
	}
	var jobID string
	if err := pool.QueryRow(ctx, `SELECT job_id FROM job_attempts`).Scan(&jobID); err != nil || jobID != "job_1" {
		t.Errorf("left: %q (%v), want the job's row", jobID, err)
	}
}
