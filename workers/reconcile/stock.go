package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// stock reports every SKU whose stock is not its initial stock plus its
// ledger, and ledger rows for a SKU inventory_items does not know (which the
// foreign key forbids while it stands).
func (r *run) stock(ctx context.Context) error {
	const query = `
SELECT coalesce(i.sku, l.sku), i.sku IS NOT NULL,
       coalesce(i.initial_stock, 0), coalesce(i.stock, 0), coalesce(l.total, 0), coalesce(l.n, 0)
  FROM inventory_items i
  FULL JOIN (SELECT sku, sum(delta)::bigint AS total, count(*) AS n
               FROM inventory_ledger GROUP BY sku) l ON l.sku = i.sku`
	var orphans []string
	err := r.scan(ctx, CheckStock, query, nil, func(rows pgx.Rows) error {
		var (
			sku                   string
			known                 bool
			initial, stock, total int64
			n                     int64
		)
		if err := rows.Scan(&sku, &known, &initial, &stock, &total, &n); err != nil {
			return err
		}
		switch {
		case !known:
			orphans = append(orphans, sku)
		case stock != initial+total:
			r.violation(CheckStock,
				fmt.Sprintf("SKU %s has stock %d, want %d = initial %d %+d from %d ledger rows (off by %+d)",
					sku, stock, initial+total, initial, total, n, stock-initial-total),
				sku)
		case stock < 0:
			r.violation(CheckStock, fmt.Sprintf("SKU %s has negative stock %d", sku, stock), sku)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The adjustments of an unknown SKU, once the scan is done (a
	// transaction runs one query at a time).
	for _, sku := range orphans {
		var ids []string
		if err := r.tx.QueryRow(ctx, `SELECT array_agg(adjustment_id ORDER BY created_at, adjustment_id) FROM inventory_ledger WHERE sku = $1`,
			sku).Scan(&ids); err != nil {
			return err
		}
		r.violation(CheckStock,
			fmt.Sprintf("ledger adjusts SKU %s, which inventory_items does not know (adjustments %s)", sku, strings.Join(ids, ", ")),
			append([]string{sku}, ids...)...)
	}
	return nil
}
