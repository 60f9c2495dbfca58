package invariants

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

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
