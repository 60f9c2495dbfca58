package shipments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/receiver"
)

// Order is the shipment.book payload.
type Order struct {
	OrderID  string `json:"order_id"`
	Quantity int64  `json:"quantity"`
}

// Schema is the shipments table: one shipment per (tenant, order).
const Schema = `
CREATE TABLE IF NOT EXISTS shipments (
    id            bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant        text        NOT NULL,
    order_id      text        NOT NULL,
    quantity      bigint      NOT NULL CHECK (quantity > 0),
    fencing_token bigint      NOT NULL,
    job_id        text        NOT NULL,
    booked_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, order_id)
)`

// EnsureSchema creates the receiver's own tables and the shipments table.
func EnsureSchema(ctx context.Context, db receiver.DB) error {
	if err := receiver.EnsureSchema(ctx, db, Schema); err != nil {
		return fmt.Errorf("shipments: %w", err)
	}
	return nil
}

// New returns the handler of POST /hooks/shipments: each delivery is
// verified with v and books its order's shipment in db, fenced per order.
func New(v *receiver.Verifier, db receiver.DB) http.Handler {
	return receiver.Handler(v, db, resource, book)
}

// resource is the order the job changes. A payload without an order still
// gets a resource of its own; book rejects it.
func resource(d receiver.Delivery) string {
	o, _ := parse(d.Data)
	return "order:" + o.OrderID
}

func parse(data json.RawMessage) (Order, error) {
	var o Order
	if err := json.Unmarshal(data, &o); err != nil {
		return Order{}, fmt.Errorf("shipment payload: %w", err)
	}
	var problems []error
	if o.OrderID == "" {
		problems = append(problems, errors.New("order_id is required"))
	}
	if o.Quantity <= 0 {
		problems = append(problems, fmt.Errorf("quantity %d is not positive", o.Quantity))
	}
	if err := errors.Join(problems...); err != nil {
		return Order{}, fmt.Errorf("shipment payload: %w", err)
	}
	return o, nil
}

// book inserts the shipment. receiver.Apply has already made sure this
// (tenant, key) was never applied; the order's primary key keeps a second
// job for the same order (another key) from booking it twice, and that job
// gets the existing shipment.
func book(ctx context.Context, tx pgx.Tx, d receiver.Delivery) (string, error) {
	o, err := parse(d.Data)
	if err != nil {
		return "", receiver.Reject(err) // the same payload will never book
	}
	var id int64
	err = tx.QueryRow(ctx, `
WITH booked AS (
    INSERT INTO shipments (tenant, order_id, quantity, fencing_token, job_id)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (tenant, order_id) DO NOTHING
    RETURNING id
)
SELECT id FROM booked UNION ALL SELECT id FROM shipments WHERE tenant = $1 AND order_id = $2
LIMIT 1`, d.Tenant, o.OrderID, o.Quantity, d.FencingToken, d.JobID).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("shipments: book %s/%s: %w", d.Tenant, o.OrderID, err)
	}
	return fmt.Sprintf("shp_%d", id), nil
}
