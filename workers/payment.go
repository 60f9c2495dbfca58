package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/workers/fence"
)

// payment.charge shows the pattern for an effect outside our database: a
// charge at a partner. No transaction of ours can include the partner, and
// a call can fail after the partner applied it (a timeout, a dropped
// connection), so the only safe retry is one the partner can recognise:
// every attempt sends the same Idempotency-Key, `payment:{payment_id}`, and
// the same body, and a partner that honours keys applies the charge once
// and answers each repeat with the first charge.
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
// Transient failures (5xx, 408, 425, 429, timeouts, connection errors) are
// retried by the framework with exponential backoff and full jitter; a
// circuit breaker in front of the partner stops the calls while it keeps
// failing (ErrCircuitOpen, transient). Any other 4xx is a refusal retrying
// cannot change: the payment and the job are marked failed.

// ErrPaymentConflict is returned, permanently, for a payment id already
// recorded with another amount or currency, and for a charge id the partner
// gave that another payment already holds.
var ErrPaymentConflict = errors.New("payment conflict")

func paymentHandler(deps Deps, db BusinessDB, charges *partner) asynq.Handler {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Handle(deps, enqueue.TaskPaymentCharge,
		enqueue.PaymentCharge.BusinessKey, enqueue.PaymentCharge.Resource,
		func(ctx context.Context, job Job[enqueue.PaymentCharge]) (string, error) {
			return chargePayment(ctx, db, charges, log, job)
		})
}

// chargePayment charges the payment once and returns the partner's charge id.
func chargePayment(ctx context.Context, db BusinessDB, charges *partner, log *slog.Logger, job Job[enqueue.PaymentCharge]) (string, error) {
	p := job.Payload
	if err := validPayload(p); err != nil {
		return "", err
	}
	charged, err := beginPayment(ctx, db, job)
	if err != nil || charged != "" {
		return charged, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return "", Permanent(fmt.Errorf("payment %q: encode: %w", p.PaymentID, err))
	}
	chargeID, err := charges.post(ctx, p.BusinessKey(), body)
	if err != nil {
		if IsPermanent(err) {
			if ferr := failPayment(ctx, db, job, err); ferr != nil {
				return "", ferr
			}
		}
		return "", fmt.Errorf("payment %q: %w", p.PaymentID, err)
	}
	return recordCharge(ctx, db, log, job, chargeID)
}

// beginPayment records the payment as pending under the job's token and
// returns "", or returns the charge id of a payment already succeeded.
func beginPayment(ctx context.Context, db BusinessDB, job Job[enqueue.PaymentCharge]) (string, error) {
	p := job.Payload
	var charged string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return err
		}
		var (
			amount   int64
			currency string
			status   string
			chargeID string
		)
		err := tx.QueryRow(ctx, `
SELECT amount_cents, currency, status, coalesce(partner_charge_id, '')
  FROM payments WHERE payment_id = $1 FOR UPDATE`, p.PaymentID).Scan(&amount, &currency, &status, &chargeID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err := tx.Exec(ctx, `
INSERT INTO payments (payment_id, amount_cents, currency, status, job_key, fencing_token)
VALUES ($1, $2, $3, 'pending', $4, $5)`, p.PaymentID, p.AmountCents, p.Currency, job.Key, job.Token)
			return err
		case err != nil:
			return err
		case amount != p.AmountCents || currency != p.Currency:
			return Permanent(fmt.Errorf("recorded for %d %s, the job asks %d %s: %w",
				amount, currency, p.AmountCents, p.Currency, ErrPaymentConflict))
		case status == "succeeded":
			charged = chargeID
			return nil
		}
		_, err = tx.Exec(ctx, `
UPDATE payments SET status = 'pending', fencing_token = $2, updated_at = now()
 WHERE payment_id = $1`, p.PaymentID, job.Token)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("payment %q: record pending: %w", p.PaymentID, err)
	}
	return charged, nil
}

// recordCharge marks the payment succeeded with the partner's charge id and
// returns the id.
func recordCharge(ctx context.Context, db BusinessDB, log *slog.Logger, job Job[enqueue.PaymentCharge], chargeID string) (string, error) {
	p := job.Payload
	var recorded string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
UPDATE payments
   SET status = 'succeeded', partner_charge_id = $2, fencing_token = $3, last_error = NULL, updated_at = now()
 WHERE payment_id = $1 AND status <> 'succeeded'
RETURNING partner_charge_id`, p.PaymentID, chargeID, job.Token).Scan(&recorded)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "23505":
			return Permanent(fmt.Errorf("the partner's charge %s belongs to another payment: %w", chargeID, ErrPaymentConflict))
		case errors.Is(err, pgx.ErrNoRows):
			// Succeeded already, and not by a newer owner (the fence
			// above): keep the charge recorded first.
			return tx.QueryRow(ctx, `SELECT partner_charge_id FROM payments WHERE payment_id = $1`, p.PaymentID).Scan(&recorded)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("payment %q: record charge %s: %w", p.PaymentID, chargeID, err)
	}
	if recorded != chargeID {
		// The partner answered one key with two charges: it did not honour
		// Idempotency-Key. The payment keeps its first charge; reconcile's
		// partner check reports the other.
		log.ErrorContext(ctx, "partner answered a repeated Idempotency-Key with another charge",
			"payment_id", p.PaymentID, "recorded_charge", recorded, "new_charge", chargeID)
	}
	return recorded, nil
}

// failPayment records a permanent refusal on the payment. It returns an
// error only when the write did not happen, and that error is not
// permanent: a stale token means a newer owner decides the job, anything
// else that the next attempt should ask again and record the answer.
func failPayment(ctx context.Context, db BusinessDB, job Job[enqueue.PaymentCharge], cause error) error {
	p := job.Payload
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
UPDATE payments SET status = 'failed', last_error = $2, fencing_token = $3, updated_at = now()
 WHERE payment_id = $1 AND status = 'pending'`, p.PaymentID, clipBody([]byte(cause.Error())), job.Token)
		return err
	})
	if err != nil {
		return fmt.Errorf("payment %q: record the partner's refusal (%v): %w", p.PaymentID, cause, err)
	}
	return nil
}
