package workerstest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/workerstest"
)

// InvoiceCreate is the payload of a service's invoice.create task.
type InvoiceCreate struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// createInvoice is the service's business function: one transaction that
// checks the fence, then writes the invoice once per order.
func createInvoice(pool *pgxpool.Pool) workers.Func[InvoiceCreate] {
	return func(ctx context.Context, job workers.Job[InvoiceCreate]) (string, error) {
		var id string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := job.CheckFence(ctx, tx); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `
WITH created AS (
    INSERT INTO customer_invoices (tenant, order_id, amount_cents) VALUES ($1, $2, $3)
    ON CONFLICT (tenant, order_id) DO NOTHING
    RETURNING id
)
SELECT id FROM created UNION ALL SELECT id FROM customer_invoices WHERE tenant = $1 AND order_id = $2
LIMIT 1`, job.Tenant, job.Payload.OrderID, job.Payload.AmountCents).Scan(&id)
		})
		return id, err
	}
}

// testCreateInvoice is the service's test of createInvoice, run by go test
// as any TestXxx(t) is; pool is its test database, migrated with
// idemgate's migrations and its own.
func testCreateInvoice(t *testing.T, pool *pgxpool.Pool) {
	w := workerstest.NewWorker(t, "invoice.create",
		func(p InvoiceCreate) string { return "invoice:" + p.OrderID },
		func(p InvoiceCreate) string { return "order:" + p.OrderID },
		createInvoice(pool), workerstest.DB(pool))
	payload := InvoiceCreate{OrderID: "o-1", AmountCents: 500}

	// A stale owner is refused: its write never happens.
	if res := w.WorkStale(t, payload); res.Class != workers.ClassStaleToken {
		t.Fatalf("stale owner: %+v, want its write refused", res)
	}
	// The worker dies after the invoice is written, before recording it.
	first := w.WorkUnrecorded(t, payload)
	// The retry runs under a higher token and finds the invoice written.
	retry := w.Work(t, payload)
	if retry.Err != nil || retry.ResultRef != first.ResultRef || retry.Job.Token <= first.Job.Token {
		t.Fatalf("retry: %+v, want invoice %s again under a higher token", retry, first.ResultRef)
	}
	// Any later delivery is a replay: the function does not run.
	if again := w.Work(t, payload); !again.Replayed || again.Ran {
		t.Fatalf("delivery after success: %+v, want a replay", again)
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM customer_invoices WHERE tenant = $1`, w.Tenant()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d invoices (%v), want 1", n, err)
	}
}

// A service tests its business function with a Worker: a stale owner is
// refused, a run after a crash writes nothing new, a retry after success is
// a replay. The test needs PostgreSQL and Redis (TEST_REDIS_URL), so this
// example is compiled and its test body, testCreateInvoice, runs in
// TestExample.
func ExampleNewWorker() {
	var _ func(*testing.T, *pgxpool.Pool) = testCreateInvoice
}
