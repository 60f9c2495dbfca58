package workers

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/workers/fence"
)

// invoiceJob is an attempt at creating the invoice of p with a fresh
// fencing token, as a new owner of the order would have.
func invoiceJob(t *testing.T, pool *pgxpool.Pool, p enqueue.InvoiceCreate) Job[enqueue.InvoiceCreate] {
	t.Helper()
	token, err := fence.Next(t.Context(), pool, p.Resource())
	if err != nil {
		t.Fatal(err)
	}
	return Job[enqueue.InvoiceCreate]{Key: p.BusinessKey(), Resource: p.Resource(), Payload: p, Token: token, Attempt: 1}
}

// A run after a crash that came between the invoice's commit and the job's
// success: the second run returns the first invoice.
func TestInvoiceRerunReturnsTheExistingInvoice(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	p := enqueue.InvoiceCreate{OrderID: "o-7", AmountCents: 500, Currency: "EUR"}
	first, err := createInvoice(t.Context(), pool, invoiceJob(t, pool, p))
	if err != nil {
		t.Fatal(err)
	}
	again, err := createInvoice(t.Context(), pool, invoiceJob(t, pool, p))
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if again != first {
		t.Fatalf("second run returned invoice %s, want the first one, %s", again, first)
	}
	if ids := strings1(t, pool, `SELECT id FROM invoices WHERE order_id = 'o-7'`); len(ids) != 1 {
		t.Fatalf("invoices of the order = %q, want one", ids)
	}
}

func TestInvoiceRefusals(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	original := enqueue.InvoiceCreate{OrderID: "o-8", AmountCents: 500, Currency: "EUR"}
	stale := invoiceJob(t, pool, original) // drawn first, so older than every later token
	if _, err := createInvoice(t.Context(), pool, invoiceJob(t, pool, original)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		job       Job[enqueue.InvoiceCreate]
		permanent bool
		want      error
	}{
		{name: "another amount", job: invoiceJob(t, pool, enqueue.InvoiceCreate{OrderID: "o-8", AmountCents: 600, Currency: "EUR"}), permanent: true, want: ErrInvoiceConflict},
		{name: "another currency", job: invoiceJob(t, pool, enqueue.InvoiceCreate{OrderID: "o-8", AmountCents: 500, Currency: "USD"}), permanent: true, want: ErrInvoiceConflict},
		{name: "invalid payload", job: invoiceJob(t, pool, enqueue.InvoiceCreate{OrderID: "o-9", AmountCents: 0, Currency: "EUR"}), permanent: true, want: enqueue.ErrInvalid},
		{name: "stale token", job: stale, want: fence.ErrStaleToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := createInvoice(t.Context(), pool, tt.job)
			if !errors.Is(err, tt.want) || IsPermanent(err) != tt.permanent {
				t.Fatalf("createInvoice = %q, %v; want %v (permanent %v)", ref, err, tt.want, tt.permanent)
			}
		})
	}
	if n := strings1(t, pool, `SELECT id FROM invoices`); len(n) != 1 {
		t.Fatalf("invoices = %q after the refusals, want the original only", n)
	}
}
