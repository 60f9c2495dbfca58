package examples

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers"
)

// invoice.create is idempotent by itself. (tenant, order_id) is unique, and a
// run that finds the invoice returns it. Its success commits with the invoice.
// Design: docs/design/example-jobs.md

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
