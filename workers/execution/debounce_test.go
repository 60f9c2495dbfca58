package execution_test

import (
	"errors"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/execution"
)

// TestTakeRefusesASupersededVersion: the task of a debounced job's
// version that a later submit replaced is refused, writing nothing; the
// latest version's task takes the job.
func TestTakeRefusesASupersededVersion(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (id, tenant, route, idempotency_key, task, queue, business_key, payload,
		status, not_before, debounce_key, debounce_first_at, debounce_last_at, debounce_until, debounce_coalesced)
		VALUES ('job_d1', 'acme', 'crm', 'k1', 'crm.sync', 'default', 'crm:a:3', '{}',
		        'queued', now(), 'acme:a', now(), now(), now() + interval '1 minute', 3)`); err != nil {
		t.Fatal(err)
	}
	a := execution.Attempt{Tenant: "acme", Key: "crm:a:2", Task: "crm.sync", Resource: "account:a", JobID: "job_d1", JobRecorded: true, Debounce: 2}
	if _, err := store.Take(ctx, a); !errors.Is(err, execution.ErrSuperseded) {
		t.Fatalf("Take of version 2 of a job at version 3: %v; want ErrSuperseded", err)
	}
	var status string
	var attempts, ledger int
	if err := pool.QueryRow(ctx, `SELECT status, attempts, (SELECT count(*) FROM job_attempts WHERE job_id = 'job_d1') FROM jobs WHERE id = 'job_d1'`).
		Scan(&status, &attempts, &ledger); err != nil {
		t.Fatal(err)
	}
	if status != "queued" || attempts != 0 || ledger != 0 {
		t.Fatalf("after the refusal: %s, %d attempts, %d ledger rows; want it untouched", status, attempts, ledger)
	}
	if _, err := store.Get(ctx, "acme", "crm:a:2"); !errors.Is(err, execution.ErrNotFound) {
		t.Fatalf("the superseded version's key has an execution: %v", err)
	}
	a.Key, a.Debounce = "crm:a:3", 3
	rec, err := store.Take(ctx, a)
	if err != nil || rec.Status != job.StatusProcessing || rec.Attempts != 1 {
		t.Fatalf("Take of the latest version: %+v %v; want attempt 1", rec, err)
	}
	// Once taken, an older version is still refused.
	a.Key, a.Debounce = "crm:a:1", 1
	if _, err := store.Take(ctx, a); !errors.Is(err, execution.ErrSuperseded) {
		t.Fatalf("Take of version 1 after the job was taken: %v; want ErrSuperseded", err)
	}
}
