package examples

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers"
)

// invoice.create shows the simplest pattern: the effect is idempotent by
// itself. An order of a tenant has one invoice because (tenant, order_id)
// is unique, so the insert is `ON CONFLICT (tenant, order_id) DO NOTHING`
// and a run that finds the invoice already there — a redelivery after a
// crash between the commit and the job's success being recorded — returns
// that invoice instead of making a second one. The lock and the fence add
// nothing to correctness here; they keep two workers from doing the work at
// once and a stale one from writing at all.
//
// The job's success is recorded in the same transaction (Job.CompleteTx):
// the invoice and the record that the job made it commit together, so
// the crash above can only come from a database outside this one, and
// the job costs one commit for its effect and its success.

// ErrInvoiceConflict is returned, permanently, for an order that already has
// an invoice with another amount or currency: the first request for an
// order decides its invoice, and a different one is a client error, not a
// replay. The framework refuses such a job before it runs (the same
// business key with another payload); this is the table's own line.
var ErrInvoiceConflict = errors.New("order already invoiced with another amount")

// invoices runs invoice.create.
type invoices struct {
	db DB
}

// create returns the id of the order's invoice, creating it unless it
// exists.
func (s invoices) create(ctx context.Context, job workers.Job[InvoiceCreate]) (string, error) {
	p := job.Payload
	var id string
	err := fenced(ctx, s.db, job, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
INSERT INTO invoices (tenant, order_id, amount_cents, currency, job_key, fencing_token)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, order_id) DO NOTHING
RETURNING id`, job.Tenant, p.OrderID, p.AmountCents, p.Currency, job.Key, job.Token).Scan(&id)
		if err == nil {
			return job.CompleteTx(ctx, tx, id)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The order has its invoice already. This statement runs on a
		// snapshot of its own, taken after the insert saw the conflict, so
		// it sees the row that caused it.
		var (
			amount   int64
			currency string
		)
		if err := tx.QueryRow(ctx, `SELECT id, amount_cents, currency FROM invoices WHERE tenant = $1 AND order_id = $2`,
			job.Tenant, p.OrderID).Scan(&id, &amount, &currency); err != nil {
			return fmt.Errorf("read the existing invoice: %w", err)
		}
		if amount != p.AmountCents || currency != p.Currency {
			return workers.Permanent(fmt.Errorf("order %q: invoice %s is for %d %s, not %d %s: %w",
				p.OrderID, id, amount, currency, p.AmountCents, p.Currency, ErrInvoiceConflict))
		}
		return job.CompleteTx(ctx, tx, id)
	})
	if err != nil {
		return "", fmt.Errorf("invoice for order %q: %w", p.OrderID, err)
	}
	return id, nil
}
