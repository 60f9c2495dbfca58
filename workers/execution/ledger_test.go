package execution_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/execution"
)

// TestLedger: every attempt leaves one row with its token and outcome,
// written by the statements that take and finish the job; an attempt a
// later one finds unfinished is crashed, a lost one says so, and a busy
// delivery is recorded without a token.
func TestLedger(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	a := execution.Attempt{Tenant: "acme", Key: "payment:1", Task: "payment.charge", Resource: "acme/payment:1",
		JobID: "job_1", Worker: "w1"}

	first, err := store.Take(ctx, a) // dies without an outcome
	if err != nil {
		t.Fatal(err)
	}
	second, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MarkRetrying(ctx, "acme", "payment:1", second.FencingToken, "partner 500"); err != nil {
		t.Fatal(err)
	}
	third, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnavailable(ctx, "acme", "payment:1", third.FencingToken, "partner 503"); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordBusy(ctx, a); err != nil {
		t.Fatal(err)
	}
	fourth, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// A stale attempt reports its loss after the fourth has taken over:
	// it cannot touch the fourth's row.
	if err := store.EndAttempt(ctx, "acme", "payment:1", third.FencingToken, execution.OutcomeLockLost, "late"); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkSucceeded(ctx, "acme", "payment:1", fourth.FencingToken, "ch_1"); err != nil {
		t.Fatal(err)
	}
	// A late report of the first attempt replaces "crashed".
	if err := store.EndAttempt(ctx, "acme", "payment:1", first.FencingToken, execution.OutcomeLockLost, "lease lost"); err != nil {
		t.Fatal(err)
	}

	got, err := execution.Attempts(ctx, pool, "acme", "payment:1")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		attempt int
		token   int64
		outcome execution.Outcome
		err     string
	}{
		{1, first.FencingToken, execution.OutcomeLockLost, "lease lost"},
		{2, second.FencingToken, execution.OutcomeTransient, "partner 500"},
		{3, third.FencingToken, execution.OutcomeUnavailable, "partner 503"},
		{2, 0, execution.OutcomeLockBusy, ""},
		{3, fourth.FencingToken, execution.OutcomeSucceeded, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("ledger has %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Attempt != w.attempt || g.FencingToken != w.token || g.Outcome != w.outcome || g.Error != w.err ||
			g.JobID != "job_1" || g.Worker != "w1" || g.EndedAt.IsZero() || g.EndedAt.Before(g.StartedAt) {
			t.Errorf("row %d: %+v, want attempt %d token %d %s %q", i, g, w.attempt, w.token, w.outcome, w.err)
		}
	}
	if !(first.FencingToken < second.FencingToken && second.FencingToken < third.FencingToken && third.FencingToken < fourth.FencingToken) {
		t.Errorf("tokens do not rise: %d %d %d %d", first.FencingToken, second.FencingToken, third.FencingToken, fourth.FencingToken)
	}

	// A job taken but never finished shows as running until a later attempt.
	b := a
	b.Key, b.Resource = "payment:2", "acme/payment:2"
	if _, err := store.Take(ctx, b); err != nil {
		t.Fatal(err)
	}
	running, err := execution.Attempts(ctx, pool, "acme", "payment:2")
	if err != nil || len(running) != 1 || running[0].Outcome != "" || !running[0].EndedAt.IsZero() {
		t.Fatalf("a running attempt: %+v %v", running, err)
	}
	if err := store.MarkFailed(ctx, "acme", "payment:2", running[0].FencingToken, "card declined"); err != nil {
		t.Fatal(err)
	}
	failed, _ := execution.Attempts(ctx, pool, "acme", "payment:2")
	if len(failed) != 1 || failed[0].Outcome != execution.OutcomePermanent || failed[0].Error != "card declined" {
		t.Fatalf("a permanent failure: %+v", failed)
	}
}

// TestDeleteEndedAttempts: the janitor deletes ended rows past the
// retention in bounded batches and leaves running attempts alone.
func TestDeleteEndedAttempts(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	store := execution.New(pool)
	ctx := t.Context()
	for i := range 3 {
		a := execution.Attempt{Tenant: "acme", Key: "invoice:" + string(rune('a'+i)), Task: "invoice.create", Resource: "acme/order:1"}
		rec, err := store.Take(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := store.MarkSucceeded(ctx, "acme", a.Key, rec.FencingToken, "inv"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE job_attempts SET started_at = started_at - interval '2 hours', ended_at = ended_at - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.DeleteEndedAttempts(ctx, 3*time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("within the retention: deleted %d %v, want 0", n, err)
	}
	if n, err := store.DeleteEndedAttempts(ctx, time.Hour, 1); err != nil || n != 1 {
		t.Fatalf("a batch of 1: deleted %d %v, want 1", n, err)
	}
	if n, err := store.DeleteEndedAttempts(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("the rest: deleted %d %v, want 1 (the running attempt stays)", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM job_attempts WHERE outcome IS NULL`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("running attempts left: %d %v, want 1", left, err)
	}
}

// TestLedgerMigration: 00010 adds the ledger tables and rolls back
// cleanly, leaving the execution state alone.
func TestLedgerMigration(t *testing.T) {
	dbURL, db, p := migratedSchema(t)
	ctx := t.Context()
	pool := testkit.PoolAt(t, dbURL)
	store := execution.New(pool)
	a := execution.Attempt{Tenant: "acme", Key: "invoice:1", Task: "invoice.create", Resource: "acme/order:1"}
	if _, err := store.Take(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 9); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"job_attempts", "idempotency_claims"} {
		var exists bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || exists {
			t.Fatalf("%s after rolling 00010 back: exists=%v %v", table, exists, err)
		}
	}
	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM job_executions WHERE key = 'invoice:1'`).Scan(&status); err != nil || status != "processing" {
		t.Fatalf("the execution after rolling 00010 back: %q %v", status, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := execution.Attempts(ctx, pool, "acme", "invoice:1")
	if err != nil || len(entries) != 1 || entries[0].FencingToken != rec.FencingToken {
		t.Fatalf("the ledger after 00010 again: %+v %v, want the new attempt only", entries, err)
	}
}
