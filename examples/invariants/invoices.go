package invariants

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

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
