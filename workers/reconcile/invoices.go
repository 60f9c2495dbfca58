package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// invoices reports every order with more than one invoice. The unique
// order_id makes it impossible while the constraint stands.
func (r *run) invoices(ctx context.Context) error {
	const query = `
SELECT order_id, array_agg(id ORDER BY created_at, id)
  FROM invoices
 GROUP BY order_id`
	return r.scan(ctx, CheckInvoices, query, nil, func(rows pgx.Rows) error {
		var (
			order string
			ids   []string
		)
		if err := rows.Scan(&order, &ids); err != nil {
			return err
		}
		if len(ids) > 1 {
			r.violation(CheckInvoices,
				fmt.Sprintf("order %s has %d invoices (%s), want one", order, len(ids), strings.Join(ids, ", ")),
				append([]string{order}, ids...)...)
		}
		return nil
	})
}
