package workers

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/workers/fence"
)

// invoice.create shows the simplest pattern: the effect is idempotent by
// itself. An order has one invoice because invoices.order_id is unique, so
// the insert is `ON CONFLICT (order_id) DO NOTHING` and a run that finds the
// invoice already there — a redelivery after a crash between the commit and
// the job's success being recorded — returns that invoice instead of making
// a second one. The lock and the fence add nothing to correctness here;
// they keep two workers from doing the work at once and a stale one from
// writing at all.

// ErrInvoiceConflict is returned, permanently, for an order that already has
// an invoice with another amount or currency: the first request for an
// order decides its invoice, and a different one is a client error, not a
// replay.
var ErrInvoiceConflict = errors.New("order already invoiced with another amount")

func invoiceHandler(deps Deps, db BusinessDB) asynq.Handler {
	return Handle(deps, enqueue.TaskInvoiceCreate,
		enqueue.InvoiceCreate.BusinessKey, enqueue.InvoiceCreate.Resource,
		func(ctx context.Context, job Job[enqueue.InvoiceCreate]) (string, error) {
			return createInvoice(ctx, db, job)
		})
}

// createInvoice returns the id of the order's invoice, creating it unless
// it exists.
func createInvoice(ctx context.Context, db BusinessDB, job Job[enqueue.InvoiceCreate]) (string, error) {
	p := job.Payload
	if err := validPayload(p); err != nil {
		return "", err
	}
	var id string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
INSERT INTO invoices (order_id, amount_cents, currency, job_key, fencing_token)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (order_id) DO NOTHING
RETURNING id`, p.OrderID, p.AmountCents, p.Currency, job.Key, job.Token).Scan(&id)
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
		if err := tx.QueryRow(ctx, `SELECT id, amount_cents, currency FROM invoices WHERE order_id = $1`,
			p.OrderID).Scan(&id, &amount, &currency); err != nil {
			return fmt.Errorf("read the existing invoice: %w", err)
		}
		if amount != p.AmountCents || currency != p.Currency {
			return Permanent(fmt.Errorf("order %q: invoice %s is for %d %s, not %d %s: %w",
				p.OrderID, id, amount, currency, p.AmountCents, p.Currency, ErrInvoiceConflict))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("invoice for order %q: %w", p.OrderID, err)
	}
	return id, nil
}
