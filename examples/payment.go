package examples

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers"
)

// payment.charge sends the same tenant-scoped Idempotency-Key on every attempt,
// between two fenced transactions. The partner dedupes the charge.
// Design: docs/design/example-jobs.md

// ErrPaymentConflict is returned, permanently, for a payment id already
// recorded with another amount or currency, and for a charge id the partner
// gave that another payment already holds.
var ErrPaymentConflict = errors.New("payment conflict")

// payments runs payment.charge.
type payments struct {
	db      DB
	charges *partner
	log     *slog.Logger
}

// charge charges the payment once and returns the partner's charge id.
func (s payments) charge(ctx context.Context, job workers.Job[PaymentCharge]) (string, error) {
	p := job.Payload
	charged, err := s.begin(ctx, job)
	if err != nil || charged != "" {
		return charged, err
	}
	chargeID, err := send(ctx, s.charges, job)
	if err != nil {
		if workers.IsPermanent(err) {
			if ferr := s.fail(ctx, job, err); ferr != nil {
				return "", ferr
			}
		}
		return "", fmt.Errorf("payment %q: %w", p.PaymentID, err)
	}
	id, err := recordEffect(ctx, s.db, s.log, job, chargeID, effectRecord{
		entity: "payment",
		write: func(tx pgx.Tx) pgx.Row {
			return tx.QueryRow(ctx, `
UPDATE payments
   SET status = 'succeeded', partner_charge_id = $3, fencing_token = $4, last_error = NULL, updated_at = now()
 WHERE tenant = $1 AND payment_id = $2 AND status <> 'succeeded'
RETURNING partner_charge_id`, job.Tenant, p.PaymentID, chargeID, job.Token)
		},
		first: func(tx pgx.Tx) pgx.Row {
			return tx.QueryRow(ctx, `SELECT partner_charge_id FROM payments WHERE tenant = $1 AND payment_id = $2`, job.Tenant, p.PaymentID)
		},
		conflict: ErrPaymentConflict,
	})
	if err != nil {
		return "", fmt.Errorf("payment %q: %w", p.PaymentID, err)
	}
	return id, nil
}

// begin records the payment as pending under the job's token and returns
// "", or returns the charge id of a payment already succeeded.
func (s payments) begin(ctx context.Context, job workers.Job[PaymentCharge]) (string, error) {
	p := job.Payload
	var charged string
	err := fenced(ctx, s.db, job, func(tx pgx.Tx) error {
		var (
			amount   int64
			currency string
			status   string
			chargeID string
		)
		err := tx.QueryRow(ctx, `
SELECT amount_cents, currency, status, coalesce(partner_charge_id, '')
  FROM payments WHERE tenant = $1 AND payment_id = $2 FOR UPDATE`, job.Tenant, p.PaymentID).Scan(&amount, &currency, &status, &chargeID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err := tx.Exec(ctx, `
INSERT INTO payments (tenant, payment_id, amount_cents, currency, status, job_key, fencing_token)
VALUES ($1, $2, $3, $4, 'pending', $5, $6)`, job.Tenant, p.PaymentID, p.AmountCents, p.Currency, job.Key, job.Token)
			return err
		case err != nil:
			return err
		case amount != p.AmountCents || currency != p.Currency:
			return workers.Permanent(fmt.Errorf("recorded for %d %s, the job asks %d %s: %w",
				amount, currency, p.AmountCents, p.Currency, ErrPaymentConflict))
		case status == "succeeded":
			charged = chargeID
			return nil
		}
		_, err = tx.Exec(ctx, `
UPDATE payments SET status = 'pending', fencing_token = $3, updated_at = now()
 WHERE tenant = $1 AND payment_id = $2`, job.Tenant, p.PaymentID, job.Token)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("payment %q: record pending: %w", p.PaymentID, err)
	}
	return charged, nil
}

// fail records a permanent refusal on the payment. It returns an error
// only when the write did not happen, and that error is not permanent: a
// stale token means a newer owner decides the job, anything else that the
// next attempt should ask again and record the answer.
func (s payments) fail(ctx context.Context, job workers.Job[PaymentCharge], cause error) error {
	p := job.Payload
	err := fenced(ctx, s.db, job, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
UPDATE payments SET status = 'failed', last_error = $3, fencing_token = $4, updated_at = now()
 WHERE tenant = $1 AND payment_id = $2 AND status = 'pending'`, job.Tenant, p.PaymentID, clipBody([]byte(cause.Error())), job.Token)
		return err
	})
	if err != nil {
		return fmt.Errorf("payment %q: record the partner's refusal (%v): %w", p.PaymentID, cause, err)
	}
	return nil
}
