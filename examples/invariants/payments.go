package invariants

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

// payments reports a succeeded payment without a partner charge id, a
// payment that holds a charge without having succeeded, and a charge id
// held by more than one payment (the unique partner_charge_id and a check
// constraint forbid these while they stand).
func (c checks) payments(ctx context.Context, s *reconcile.Snapshot) error {
	const scanQuery = `
SELECT tenant, payment_id, status, coalesce(partner_charge_id, '')
  FROM payments
 WHERE status = 'succeeded' OR partner_charge_id IS NOT NULL`
	err := s.Scan(ctx, CheckPayments, scanQuery, nil, func(rows pgx.Rows) error {
		var tenant, id, status, charge string
		if err := rows.Scan(&tenant, &id, &status, &charge); err != nil {
			return err
		}
		bkey := "payment:" + id // the payment.charge task's business key
		id = workers.Scope(tenant, id)
		switch {
		case status == "succeeded" && charge == "":
			s.JobViolation(CheckPayments, tenant, bkey, fmt.Sprintf("payment %s succeeded without a partner charge id", id), id)
		case status != "succeeded":
			s.JobViolation(CheckPayments, tenant, bkey, fmt.Sprintf("payment %s is %s but holds partner charge %s", id, status, charge), id, charge)
		}
		return nil
	})
	if err != nil {
		return err
	}
	const dupQuery = `
SELECT partner_charge_id,
       array_agg(tenant ORDER BY tenant, payment_id), array_agg(payment_id ORDER BY tenant, payment_id)
  FROM payments
 WHERE partner_charge_id IS NOT NULL
 GROUP BY partner_charge_id
HAVING count(*) > 1`
	rows, err := s.Tx().Query(ctx, dupQuery)
	if err != nil {
		return err
	}
	type dup struct {
		Charge   string
		Tenants  []string
		Payments []string
	}
	dups, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dup])
	if err != nil {
		return err
	}
	for _, d := range dups {
		for i, tenant := range d.Tenants {
			d.Payments[i] = workers.Scope(tenant, d.Payments[i])
		}
		s.Violation(CheckPayments,
			fmt.Sprintf("partner charge %s is held by %d payments (%s), want one", d.Charge, len(d.Payments), strings.Join(d.Payments, ", ")),
			append([]string{d.Charge}, d.Payments...)...)
	}
	return nil
}
