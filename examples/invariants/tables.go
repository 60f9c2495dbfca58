package invariants

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

// The checks of the business tables themselves: one effect per business
// entity, whatever the jobs and executions say.

// invoices reports every order of a tenant with more than one invoice. The
// unique (tenant, order_id) makes it impossible while the constraint
// stands.
func (c checks) invoices(ctx context.Context, s *reconcile.Snapshot) error {
	const query = `
SELECT tenant, order_id, array_agg(id ORDER BY created_at, id)
  FROM invoices
 GROUP BY tenant, order_id`
	return s.Scan(ctx, CheckInvoices, query, nil, func(rows pgx.Rows) error {
		var (
			tenant, order string
			ids           []string
		)
		if err := rows.Scan(&tenant, &order, &ids); err != nil {
			return err
		}
		order = workers.Scope(tenant, order)
		if len(ids) > 1 {
			s.Violation(CheckInvoices,
				fmt.Sprintf("order %s has %d invoices (%s), want one", order, len(ids), strings.Join(ids, ", ")),
				append([]string{order}, ids...)...)
		}
		return nil
	})
}

// stock reports every tenant's SKU whose stock is not its initial stock
// plus its ledger, and ledger rows for a SKU the tenant's inventory_items
// does not know (which the foreign key forbids while it stands).
func (c checks) stock(ctx context.Context, s *reconcile.Snapshot) error {
	const query = `
SELECT coalesce(i.tenant, l.tenant), coalesce(i.sku, l.sku), i.sku IS NOT NULL,
       coalesce(i.initial_stock, 0), coalesce(i.stock, 0), coalesce(l.total, 0), coalesce(l.n, 0)
  FROM inventory_items i
  FULL JOIN (SELECT tenant, sku, sum(delta)::bigint AS total, count(*) AS n
               FROM inventory_ledger GROUP BY tenant, sku) l ON l.tenant = i.tenant AND l.sku = i.sku`
	type item struct{ tenant, sku string }
	var orphans []item
	err := s.Scan(ctx, CheckStock, query, nil, func(rows pgx.Rows) error {
		var (
			tenant, sku           string
			known                 bool
			initial, stock, total int64
			n                     int64
		)
		if err := rows.Scan(&tenant, &sku, &known, &initial, &stock, &total, &n); err != nil {
			return err
		}
		if !known {
			orphans = append(orphans, item{tenant, sku})
			return nil
		}
		sku = workers.Scope(tenant, sku)
		switch {
		case stock != initial+total:
			s.Violation(CheckStock,
				fmt.Sprintf("SKU %s has stock %d, want %d = initial %d %+d from %d ledger rows (off by %+d)",
					sku, stock, initial+total, initial, total, n, stock-initial-total),
				sku)
		case stock < 0:
			s.Violation(CheckStock, fmt.Sprintf("SKU %s has negative stock %d", sku, stock), sku)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The adjustments of an unknown SKU, once the scan is done (a
	// transaction runs one query at a time).
	for _, o := range orphans {
		var ids []string
		if err := s.Tx().QueryRow(ctx, `
SELECT array_agg(adjustment_id ORDER BY created_at, adjustment_id)
  FROM inventory_ledger WHERE tenant = $1 AND sku = $2`, o.tenant, o.sku).Scan(&ids); err != nil {
			return err
		}
		sku := workers.Scope(o.tenant, o.sku)
		s.Violation(CheckStock,
			fmt.Sprintf("ledger adjusts SKU %s, which inventory_items does not know (adjustments %s)", sku, strings.Join(ids, ", ")),
			append([]string{sku}, ids...)...)
	}
	return nil
}

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
