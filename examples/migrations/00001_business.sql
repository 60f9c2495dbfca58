-- +goose Up
-- The tables of the example business handlers in package examples
-- (invoice.go, inventory.go, payment.go, notification.go); read by
-- examples/reconcile. They were created by idemgate's own migration 00004
-- before they became the examples' own: a database migrated then holds
-- them already (perhaps with 00002's changes too), so they are created
-- only when there are none. Every row carries the business key of the job that
-- wrote it (job_key) and the fencing token it wrote with, so an operator can
-- follow an effect back to its job and its attempt.

-- +goose StatementBegin
DO $$
BEGIN
  IF to_regclass('invoices') IS NULL THEN
    -- One invoice per order: the unique order_id is what makes invoice.create
    -- idempotent (INSERT … ON CONFLICT (order_id) DO NOTHING).
    CREATE TABLE invoices (
        id            text        PRIMARY KEY DEFAULT 'inv_' || replace(gen_random_uuid()::text, '-', ''),
        order_id      text        NOT NULL UNIQUE,
        amount_cents  bigint      NOT NULL CHECK (amount_cents > 0),
        currency      text        NOT NULL,
        job_key       text        NOT NULL,
        fencing_token bigint      NOT NULL,
        created_at    timestamptz NOT NULL DEFAULT now()
    );

    -- Stock per SKU. stock = initial_stock + the sum of the SKU's ledger deltas
    -- (reconcile checks it); fencing_token is the token of the last adjustment,
    -- and an adjustment only applies with a newer one.
    CREATE TABLE inventory_items (
        sku           text        PRIMARY KEY,
        initial_stock bigint      NOT NULL CHECK (initial_stock >= 0),
        stock         bigint      NOT NULL CHECK (stock >= 0),
        fencing_token bigint      NOT NULL DEFAULT 0,
        updated_at    timestamptz NOT NULL DEFAULT now()
    );

    -- One row per applied adjustment: the primary key makes a replayed
    -- adjustment a no-op, and the rows explain every unit of stock.
    CREATE TABLE inventory_ledger (
        adjustment_id text        PRIMARY KEY,
        sku           text        NOT NULL REFERENCES inventory_items (sku),
        delta         bigint      NOT NULL CHECK (delta <> 0),
        job_key       text        NOT NULL,
        fencing_token bigint      NOT NULL,
        created_at    timestamptz NOT NULL DEFAULT now()
    );

    CREATE INDEX inventory_ledger_sku ON inventory_ledger (sku);

    -- One row per payment. 'pending' is written before the partner is called,
    -- so a charge in flight is visible; 'succeeded' carries the partner's charge
    -- id, which no two payments share.
    CREATE TABLE payments (
        payment_id        text        PRIMARY KEY,
        amount_cents      bigint      NOT NULL CHECK (amount_cents > 0),
        currency          text        NOT NULL,
        status            text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
        partner_charge_id text        UNIQUE,
        last_error        text,
        job_key           text        NOT NULL,
        fencing_token     bigint      NOT NULL,
        created_at        timestamptz NOT NULL DEFAULT now(),
        updated_at        timestamptz NOT NULL DEFAULT now(),
        CHECK (status <> 'succeeded' OR partner_charge_id IS NOT NULL)
    );

    -- One row per message sent, written after the partner accepted it: the
    -- record, not the Redis dedup window, says whether a message was sent.
    CREATE TABLE notifications (
        dedup_key          text        PRIMARY KEY,
        event_id           text        NOT NULL,
        user_id            text        NOT NULL,
        template           text        NOT NULL,
        partner_message_id text        NOT NULL UNIQUE,
        job_key            text        NOT NULL,
        fencing_token      bigint      NOT NULL,
        created_at         timestamptz NOT NULL DEFAULT now()
    );
  END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE notifications;
DROP TABLE payments;
DROP TABLE inventory_ledger;
DROP TABLE inventory_items;
DROP TABLE invoices;
