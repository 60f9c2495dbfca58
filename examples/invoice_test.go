package examples

import (
	"errors"
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/fence"
)

// A run after a crash that came between the invoice's commit and the job's
// success: the second run returns the first invoice.
func TestInvoiceRerunReturnsTheExistingInvoice(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t, tables())
	s := invoices{db: pool}
	p := InvoiceCreate{OrderID: "o-7", AmountCents: 500, Currency: "EUR"}
	first, err := s.create(t.Context(), directJob(t, pool, "acme", TaskInvoiceCreate, p))
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.create(t.Context(), directJob(t, pool, "acme", TaskInvoiceCreate, p))
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

// The handler's own refusals, behind the framework's: a job that reaches
// it with another amount for an invoiced order (the framework's execution
// state lost, a row written by other means) is refused, and so is an
// owner whose token is stale.
func TestInvoiceRefusals(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t, tables())
	s := invoices{db: pool}
	original := InvoiceCreate{OrderID: "o-8", AmountCents: 500, Currency: "EUR"}
	stale := directJob(t, pool, "acme", TaskInvoiceCreate, original) // drawn first, so older than every later token
	if _, err := s.create(t.Context(), directJob(t, pool, "acme", TaskInvoiceCreate, original)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		job       workers.Job[InvoiceCreate]
		permanent bool
		want      error
	}{
		{name: "another amount", job: directJob(t, pool, "acme", TaskInvoiceCreate, InvoiceCreate{OrderID: "o-8", AmountCents: 600, Currency: "EUR"}), permanent: true, want: ErrInvoiceConflict},
		{name: "another currency", job: directJob(t, pool, "acme", TaskInvoiceCreate, InvoiceCreate{OrderID: "o-8", AmountCents: 500, Currency: "USD"}), permanent: true, want: ErrInvoiceConflict},
		{name: "stale token", job: stale, want: fence.ErrStaleToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := s.create(t.Context(), tt.job)
			if !errors.Is(err, tt.want) || workers.IsPermanent(err) != tt.permanent {
				t.Fatalf("create = %q, %v; want %v (permanent %v)", ref, err, tt.want, tt.permanent)
			}
		})
	}
	if n := strings1(t, pool, `SELECT id FROM invoices`); len(n) != 1 {
		t.Fatalf("invoices = %q after the refusals, want the original only", n)
	}
	// Another tenant's order with the same id and another amount is not a
	// conflict: it is another order.
	if _, err := s.create(t.Context(), directJob(t, pool, "globex", TaskInvoiceCreate, InvoiceCreate{OrderID: "o-8", AmountCents: 600, Currency: "EUR"})); err != nil {
		t.Fatalf("globex's order o-8: %v", err)
	}
}
