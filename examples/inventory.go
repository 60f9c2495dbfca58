package examples

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/workers"
	"github.com/idemgate/idemgate/workers/fence"
)

// inventory.adjust pairs the stock update with a ledger row keyed by the
// adjustment, in one transaction. The update is fenced by the token.
// Design: docs/design/example-jobs.md

// ErrInsufficientStock is returned, permanently, for an adjustment that
// would make a SKU's stock negative.
var ErrInsufficientStock = errors.New("insufficient stock")

// ErrAdjustmentConflict is returned, permanently, for an adjustment id that
// was already applied with another SKU or delta.
var ErrAdjustmentConflict = errors.New("adjustment id already applied with another SKU or delta")

// inventory runs inventory.adjust.
type inventory struct {
	db DB
}

// adjust applies the adjustment once and returns its id.
func (s inventory) adjust(ctx context.Context, job workers.Job[InventoryAdjust]) (string, error) {
	p := job.Payload
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO inventory_items (tenant, sku, initial_stock, stock) VALUES ($1, $2, 0, 0)
ON CONFLICT (tenant, sku) DO NOTHING`, job.Tenant, p.SKU); err != nil {
			return fmt.Errorf("create the SKU: %w", err)
		}
		tag, err := tx.Exec(ctx, `
INSERT INTO inventory_ledger (tenant, adjustment_id, sku, delta, job_key, fencing_token)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, adjustment_id) DO NOTHING`, job.Tenant, p.AdjustmentID, p.SKU, p.Delta, job.Key, job.Token)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if tag.RowsAffected() == 0 {
			if err := sameAdjustment(ctx, tx, job.Tenant, p); err != nil {
				return err
			}
			return job.CompleteTx(ctx, tx, p.AdjustmentID)
		}
		// FOR UPDATE queues adjustments of one SKU behind each other even
		// without the Redis lock, and reads the newest committed stock.
		var stock, latest int64
		if err := tx.QueryRow(ctx, `SELECT stock, fencing_token FROM inventory_items WHERE tenant = $1 AND sku = $2 FOR UPDATE`,
			job.Tenant, p.SKU).Scan(&stock, &latest); err != nil {
			return fmt.Errorf("read the stock: %w", err)
		}
		if latest >= job.Token {
			return fence.Stale(job.Resource, job.Token, latest)
		}
		if stock+p.Delta < 0 {
			return workers.Permanent(fmt.Errorf("SKU %q has %d, adjustment %q needs %d: %w",
				p.SKU, stock, p.AdjustmentID, -p.Delta, ErrInsufficientStock))
		}
		tag, err = tx.Exec(ctx, `
UPDATE inventory_items SET stock = stock + $3, fencing_token = $4, updated_at = now()
 WHERE tenant = $1 AND sku = $2 AND fencing_token < $4`, job.Tenant, p.SKU, p.Delta, job.Token)
		if err != nil {
			return fmt.Errorf("update the stock: %w", err)
		}
		if err := fence.Expect(tag, job.Resource, job.Token); err != nil {
			return err
		}
		// The stock, its ledger row and the job's success commit together.
		return job.CompleteTx(ctx, tx, p.AdjustmentID)
	})
	if err != nil {
		return "", fmt.Errorf("adjustment %q of SKU %q: %w", p.AdjustmentID, p.SKU, err)
	}
	return p.AdjustmentID, nil
}

// sameAdjustment checks that the ledger row already there is this
// adjustment's, so the replay may return it.
func sameAdjustment(ctx context.Context, tx pgx.Tx, tenant string, p InventoryAdjust) error {
	var (
		sku   string
		delta int64
	)
	if err := tx.QueryRow(ctx, `SELECT sku, delta FROM inventory_ledger WHERE tenant = $1 AND adjustment_id = $2`,
		tenant, p.AdjustmentID).Scan(&sku, &delta); err != nil {
		return fmt.Errorf("read the ledger row: %w", err)
	}
	if sku != p.SKU || delta != p.Delta {
		return workers.Permanent(fmt.Errorf("ledger has %+d for SKU %q, the job %+d for SKU %q: %w",
			delta, sku, p.Delta, p.SKU, ErrAdjustmentConflict))
	}
	return nil
}

// SeedInventory sets the initial stock of a tenant's SKU, creating the SKU
// if needed, for tests and demos ("" is the tenant of tasks enqueued without
// one). The stock becomes initial plus the SKU's ledger, so the reconcile
// invariant holds whether or not adjustments came first; it waits for an
// adjustment of the SKU in progress. initial must not be negative.
func SeedInventory(ctx context.Context, db DB, tenant, sku string, initial int64) error {
	if sku == "" || initial < 0 {
		return fmt.Errorf("examples: seed inventory %q with %d: want a SKU and a stock of at least 0", sku, initial)
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO inventory_items (tenant, sku, initial_stock, stock) VALUES ($1, $2, $3, $3)
ON CONFLICT (tenant, sku) DO NOTHING`, tenant, sku, initial); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM inventory_items WHERE tenant = $1 AND sku = $2 FOR UPDATE`, tenant, sku); err != nil {
			return err
		}
		// A statement of its own after the row lock, so it sums every
		// adjustment committed before the lock was granted.
		_, err := tx.Exec(ctx, `
UPDATE inventory_items
   SET initial_stock = $3::bigint,
       stock = $3::bigint + (SELECT coalesce(sum(delta), 0)::bigint FROM inventory_ledger WHERE tenant = $1 AND sku = $2),
       updated_at = now()
 WHERE tenant = $1 AND sku = $2`, tenant, sku, initial)
		return err
	})
	if err != nil {
		return fmt.Errorf("examples: seed inventory %q of tenant %q: %w", sku, tenant, err)
	}
	return nil
}
