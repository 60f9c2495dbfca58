package job_test

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
)

// TestDeleteFinished: the jobs retention deletes the final jobs past it,
// oldest first and in bounded batches, with their attempt ledger and
// callbacks; it leaves unfinished jobs, final jobs within the retention, a
// job whose callback is still being sent, other jobs' ledger rows and the
// ledger rows of tasks run without a job.
func TestDeleteFinished(t *testing.T) {
	t.Parallel()
	v := setup(t)
	ctx := t.Context()
	records := job.NewStore(v.pool)
	ids := v.submit(t, 7)
	oldOK, oldFailed, oldCancelled, recent, queued, processing, sending := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	for id, s := range map[string]job.Status{
		oldOK: job.StatusSucceeded, oldFailed: job.StatusFailed, oldCancelled: job.StatusCancelled,
		recent: job.StatusSucceeded, processing: job.StatusProcessing, sending: job.StatusSucceeded,
	} {
		if err := records.SetStatus(ctx, id, s, 1, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	// Past the 30-day retention: the first three, oldest first, and the
	// job whose callback is still due. Within it: recent. The unfinished
	// ones look old too.
	for i, id := range []string{oldOK, oldFailed, oldCancelled, sending} {
		v.exec(t, `UPDATE jobs SET finished_at = now() - interval '40 days' + make_interval(secs => $2) WHERE id = $1`, id, i)
	}
	v.exec(t, `UPDATE jobs SET finished_at = now() - interval '10 days' WHERE id = $1`, recent)
	v.exec(t, `UPDATE jobs SET created_at = now() - interval '90 days', updated_at = now() - interval '90 days' WHERE id = ANY($1)`, []string{queued, processing})
	for _, id := range append(ids, "") {
		v.exec(t, `INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, started_at, ended_at, outcome)
VALUES ($1, 'acme', 'k', 't', '', 1, now() - interval '50 days', now() - interval '50 days', 'succeeded')`, id)
	}
	for _, id := range []string{oldOK, sending, recent} {
		v.exec(t, `INSERT INTO job_callbacks (job_id, seq, task, event, body) VALUES ($1, 1, 't', 'job.succeeded', '{}')`, id)
		v.exec(t, `INSERT INTO job_callback_attempts (job_id, seq, attempt, started_at, status, outcome) VALUES ($1, 1, 1, now(), 200, 'delivered')`, id)
	}
	v.exec(t, `UPDATE job_callbacks SET delivered_at = now() WHERE job_id <> $1`, sending)

	if n, err := records.DeleteFinished(ctx, 60*24*time.Hour, 10, nil); err != nil || n != 0 {
		t.Fatalf("with a 60-day retention: deleted %d (%v), want 0", n, err)
	}
	if n, err := records.DeleteFinished(ctx, job.DefaultRetention, 2, nil); err != nil || n != 2 {
		t.Fatalf("a batch of 2: deleted %d (%v), want 2", n, err)
	}
	if _, err := records.ByID(ctx, oldCancelled); err != nil {
		t.Fatalf("the batch did not delete the oldest first: the third oldest is gone (%v)", err)
	}
	if n, err := records.DeleteFinished(ctx, job.DefaultRetention, 10, nil); err != nil || n != 1 {
		t.Fatalf("the rest: deleted %d (%v), want 1", n, err)
	}
	if n, err := records.DeleteFinished(ctx, job.DefaultRetention, 10, nil); err != nil || n != 0 {
		t.Fatalf("again: deleted %d (%v), want 0", n, err)
	}

	gone := map[string]bool{oldOK: true, oldFailed: true, oldCancelled: true}
	for _, id := range append(ids, "") {
		var jobs, attempts, callbacks, callbackAttempts int
		if err := v.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs WHERE id = $1), (SELECT count(*) FROM job_attempts WHERE job_id = $1),
       (SELECT count(*) FROM job_callbacks WHERE job_id = $1), (SELECT count(*) FROM job_callback_attempts WHERE job_id = $1)`, id).
			Scan(&jobs, &attempts, &callbacks, &callbackAttempts); err != nil {
			t.Fatal(err)
		}
		switch {
		case id == "":
			if attempts != 1 {
				t.Errorf("the ledger row of a task run without a job: %d rows, want it kept", attempts)
			}
		case gone[id]:
			if jobs+attempts+callbacks+callbackAttempts != 0 {
				t.Errorf("%s, past the retention: job %d, attempts %d, callbacks %d, callback attempts %d left, want none",
					id, jobs, attempts, callbacks, callbackAttempts)
			}
		default:
			if jobs != 1 || attempts != 1 {
				t.Errorf("%s: job %d, attempts %d, want both kept", id, jobs, attempts)
			}
		}
	}

	// An operator's dlq delete takes the ledger with the job too.
	if err := records.Delete(ctx, recent); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := v.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_attempts WHERE job_id = $1) + (SELECT count(*) FROM job_callbacks WHERE job_id = $1)`, recent).Scan(&left); err != nil || left != 0 {
		t.Errorf("a deleted job left %d ledger rows (%v)", left, err)
	}
}

// TestDeleteFinishedArchivedTasks: the jobs retention deletes from the
// queue the archived tasks of the failed jobs it deletes, the job's own
// and the takeover task of an attempt that lost its lock; a failed job
// within the retention keeps its archived task.
func TestDeleteFinishedArchivedTasks(t *testing.T) {
	t.Parallel()
	v := setup(t)
	ctx := t.Context()
	records := job.NewStore(v.pool)
	ids := v.submit(t, 2)
	old, recent := ids[0], ids[1]
	client, err := asynq.ParseRedisURI(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := asynq.NewClient(client)
	t.Cleanup(func() { _ = c.Close() })
	// The old job was taken over once (its attempt with token 7 lost its
	// lock), and the takeover task made it fail.
	takeover := job.TakeoverTaskID(old, 7)
	if _, err := c.Enqueue(asynq.NewTask("invoice.create", []byte(`{}`)), asynq.TaskID(takeover), asynq.Queue(v.queue)); err != nil {
		t.Fatal(err)
	}
	v.exec(t, `INSERT INTO job_attempts (job_id, tenant, key, task, resource, attempt, fencing_token, started_at, ended_at, outcome)
VALUES ($1, 'acme', 'k', 't', 'r', 1, 7, now(), now(), 'lock_lost'), ($1, 'acme', 'k', 't', 'r', 2, 8, now(), now(), 'permanent')`, old)
	for _, id := range []string{old, recent, takeover} {
		if err := v.inspector.ArchiveTask(v.queue, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if err := records.SetStatus(ctx, id, job.StatusFailed, 2, "", "refused"); err != nil {
			t.Fatal(err)
		}
	}
	v.exec(t, `UPDATE jobs SET finished_at = now() - interval '40 days' WHERE id = $1`, old)

	if n, err := records.DeleteFinished(ctx, job.DefaultRetention, 10, v.inspector); err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want the old job", n, err)
	}
	archived, err := v.inspector.ListArchivedTasks(v.queue)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, a := range archived {
		left = append(left, a.ID)
	}
	if len(left) != 1 || left[0] != recent {
		t.Errorf("archived tasks left: %v, want only %s, the failed job within the retention", left, recent)
	}
}
