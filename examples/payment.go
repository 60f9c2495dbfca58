package examples

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers"
)

// payment.charge shows the pattern for an effect outside our database: a
// charge at a partner. No transaction of ours can include the partner, and
// a call can fail after the partner applied it (a timeout, a dropped
// connection), so the only safe retry is one the partner can recognise:
// every attempt sends the same Idempotency-Key and the same body, and a
// partner that honours keys applies the charge once and answers each repeat
// with the first charge. The partner knows nothing of our tenants and
// dedupes by the key alone, so the key is the business key scoped to the
// tenant, `acme/payment:{payment_id}`: two tenants' payments with the same
// id are two charges, never one charge answered twice.
//
// Around the call, two fenced transactions:
//
//  1. before: the payment is recorded as pending (or, when it is already
//     succeeded, its charge id is returned without calling anyone), so a
//     charge in flight is visible to operators and to reconcile;
//  2. after: the partner's charge id is recorded and the payment marked
//     succeeded; partner_charge_id is unique, so no two payments can claim
//     one charge.
//
// A partner that is unavailable (5xx, 408, 425, 429, timeouts, connection
// errors) is retried by the framework with exponential backoff and full
// jitter, and those attempts are not counted (workers.Unavailable): an
// outage longer than the backoffs delays the payment instead of failing
// it. A circuit breaker in front of the partner stops the calls while it
// keeps failing (ErrCircuitOpen, unavailable too). Any other 4xx is a
// refusal retrying cannot change: the payment and the job are marked
// failed.

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
