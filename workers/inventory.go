package workers

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/workers/fence"
)

// inventory.adjust shows the lock-and-fence pattern on a value that many
// jobs change: the stock of a SKU. A stock update is not idempotent by
// itself (stock + delta twice is wrong), so one transaction pairs it with
// a ledger row keyed by the adjustment:
//
//  1. insert the ledger row `ON CONFLICT DO NOTHING`; when it was already
//     there the adjustment has been applied (a redelivery after a crash
//     between the commit and the job's success) and the stock is left alone;
//  2. update the stock only `WHERE fencing_token < $token`: a worker that
//     lost the SKU's lock without noticing carries an older token than the
//     one that wrote last, touches no row, and the transaction — ledger row
//     included — rolls back with a *fence.StaleTokenError.
//
// The ledger is also what reconcile checks the stock against: for every
// SKU, stock = initial_stock + the sum of its ledger deltas.
//
// A SKU that inventory_items does not know yet is created by its first
// adjustment with an initial stock of 0, so a delivery of new stock needs no
// set-up step; an adjustment that would take any SKU below zero fails
// permanently (ErrInsufficientStock) and writes nothing.

// ErrInsufficientStock is returned, permanently, for an adjustment that
// would make a SKU's stock negative.
var ErrInsufficientStock = errors.New("insufficient stock")

// ErrAdjustmentConflict is returned, permanently, for an adjustment id that
// was already applied with another SKU or delta.
var ErrAdjustmentConflict = errors.New("adjustment id already applied with another SKU or delta")

func inventoryHandler(deps Deps, db BusinessDB) asynq.Handler {
	return Handle(deps, enqueue.TaskInventoryAdjust,
		enqueue.InventoryAdjust.BusinessKey, enqueue.InventoryAdjust.Resource,
		func(ctx context.Context, job Job[enqueue.InventoryAdjust]) (string, error) {
			return adjustInventory(ctx, db, job)
		})
}

// adjustInventory applies the adjustment once and returns its id.
func adjustInventory(ctx context.Context, db BusinessDB, job Job[enqueue.InventoryAdjust]) (string, error) {
	p := job.Payload
	if err := validPayload(p); err != nil {
		return "", err
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO inventory_items (sku, initial_stock, stock) VALUES ($1, 0, 0)
ON CONFLICT (sku) DO NOTHING`, p.SKU); err != nil {
			return fmt.Errorf("create the SKU: %w", err)
		}
		tag, err := tx.Exec(ctx, `
INSERT INTO inventory_ledger (adjustment_id, sku, delta, job_key, fencing_token)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (adjustment_id) DO NOTHING`, p.AdjustmentID, p.SKU, p.Delta, job.Key, job.Token)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return sameAdjustment(ctx, tx, p)
		}
		// FOR UPDATE queues adjustments of one SKU behind each other even
		// without the Redis lock, and reads the newest committed stock.
		var stock, latest int64
		if err := tx.QueryRow(ctx, `SELECT stock, fencing_token FROM inventory_items WHERE sku = $1 FOR UPDATE`,
			p.SKU).Scan(&stock, &latest); err != nil {
			return fmt.Errorf("read the stock: %w", err)
		}
		if latest >= job.Token {
			return fence.Stale(job.Resource, job.Token, latest)
		}
		if stock+p.Delta < 0 {
			return Permanent(fmt.Errorf("SKU %q has %d, adjustment %q needs %d: %w",
				p.SKU, stock, p.AdjustmentID, -p.Delta, ErrInsufficientStock))
		}
		tag, err = tx.Exec(ctx, `
UPDATE inventory_items SET stock = stock + $2, fencing_token = $3, updated_at = now()
 WHERE sku = $1 AND fencing_token < $3`, p.SKU, p.Delta, job.Token)
		if err != nil {
			return fmt.Errorf("update the stock: %w", err)
		}
		return fence.Expect(tag, job.Resource, job.Token)
	})
	if err != nil {
		return "", fmt.Errorf("adjustment %q of SKU %q: %w", p.AdjustmentID, p.SKU, err)
	}
	return p.AdjustmentID, nil
}

// sameAdjustment checks that the ledger row already there is this
// adjustment's, so the replay may return it.
func sameAdjustment(ctx context.Context, tx pgx.Tx, p enqueue.InventoryAdjust) error {
	var (
		sku   string
		delta int64
	)
	if err := tx.QueryRow(ctx, `SELECT sku, delta FROM inventory_ledger WHERE adjustment_id = $1`,
		p.AdjustmentID).Scan(&sku, &delta); err != nil {
		return fmt.Errorf("read the ledger row: %w", err)
	}
	if sku != p.SKU || delta != p.Delta {
		return Permanent(fmt.Errorf("ledger has %+d for SKU %q, the job %+d for SKU %q: %w",
			delta, sku, p.Delta, p.SKU, ErrAdjustmentConflict))
	}
	return nil
}

// SeedInventory sets the initial stock of sku, creating the SKU if needed,
// for tests and demos. The stock becomes initial plus the SKU's ledger, so
// the reconcile invariant holds whether or not adjustments came first; it
// waits for an adjustment of the SKU in progress. initial must not be
// negative.
func SeedInventory(ctx context.Context, db BusinessDB, sku string, initial int64) error {
	if sku == "" || initial < 0 {
		return fmt.Errorf("workers: seed inventory %q with %d: want a SKU and a stock of at least 0", sku, initial)
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO inventory_items (sku, initial_stock, stock) VALUES ($1, $2, $2)
ON CONFLICT (sku) DO NOTHING`, sku, initial); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM inventory_items WHERE sku = $1 FOR UPDATE`, sku); err != nil {
			return err
		}
		// A statement of its own after the row lock, so it sums every
		// adjustment committed before the lock was granted.
		_, err := tx.Exec(ctx, `
UPDATE inventory_items
   SET initial_stock = $2::bigint,
       stock = $2::bigint + (SELECT coalesce(sum(delta), 0)::bigint FROM inventory_ledger WHERE sku = $1),
       updated_at = now()
 WHERE sku = $1`, sku, initial)
		return err
	})
	if err != nil {
		return fmt.Errorf("workers: seed inventory %q: %w", sku, err)
	}
	return nil
}
