-- +goose Up
-- The example jobs' tables (00001) belong to tenants: every row carries the
-- tenant whose job wrote it, and each key that makes an effect happen once
-- is unique within a tenant. Two tenants with the same order id are two
-- businesses, with an invoice each.
--
-- Rows written before take the tenant of the earliest job with their
-- business key (jobs.business_key = job_key), as job_executions did in
-- 00006; a row no job names (a task enqueued by other means) keeps the
-- empty tenant, which such tasks run under.
--
-- idemgate's own migration 00007 did this before the tables became the
-- examples' own: a database migrated then has the tenant column already,
-- and this changes nothing there.
-- +goose StatementBegin
DO $$
DECLARE
    negative text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = current_schema() AND table_name = 'invoices' AND column_name = 'tenant') THEN
    ALTER TABLE invoices ADD COLUMN tenant text NOT NULL DEFAULT '';
    ALTER TABLE inventory_items ADD COLUMN tenant text NOT NULL DEFAULT '';
    ALTER TABLE inventory_ledger ADD COLUMN tenant text NOT NULL DEFAULT '';
    ALTER TABLE payments ADD COLUMN tenant text NOT NULL DEFAULT '';
    ALTER TABLE notifications ADD COLUMN tenant text NOT NULL DEFAULT '';

    CREATE TEMPORARY TABLE first_job AS
    SELECT DISTINCT ON (business_key) business_key, tenant
      FROM jobs ORDER BY business_key, created_at, id;

    UPDATE invoices t SET tenant = j.tenant FROM first_job j WHERE j.business_key = t.job_key;
    UPDATE inventory_ledger t SET tenant = j.tenant FROM first_job j WHERE j.business_key = t.job_key;
    UPDATE payments t SET tenant = j.tenant FROM first_job j WHERE j.business_key = t.job_key;
    UPDATE notifications t SET tenant = j.tenant FROM first_job j WHERE j.business_key = t.job_key;
    DROP TABLE first_job;

    -- A SKU has no job of its own: it belongs to the tenant of its first
    -- adjustment. A SKU that several tenants adjusted is split: each other
    -- tenant gets a row of its own, with no initial stock and its adjustments
    -- as its stock, and the first row keeps the rest. Every tenant's stock is
    -- still its initial stock plus its ledger, and the SKU's total is unchanged.
    UPDATE inventory_items i SET tenant = f.tenant
      FROM (SELECT DISTINCT ON (sku) sku, tenant
              FROM inventory_ledger ORDER BY sku, created_at, adjustment_id) f
     WHERE f.sku = i.sku;

    CREATE TEMPORARY TABLE sku_split AS
    SELECT l.tenant, l.sku, sum(l.delta)::bigint AS delta, i.fencing_token
      FROM inventory_ledger l JOIN inventory_items i ON i.sku = l.sku
     WHERE l.tenant <> i.tenant
     GROUP BY l.tenant, l.sku, i.fencing_token;

    -- A split that would leave a tenant with negative stock means tenants
    -- consumed each other's stock: that cannot be divided without a person.
        SELECT string_agg(DISTINCT sku, ', ') INTO negative FROM (
            SELECT sku FROM sku_split WHERE delta < 0
            UNION ALL
            SELECT i.sku FROM inventory_items i
              JOIN (SELECT sku, sum(delta) AS delta FROM sku_split GROUP BY sku) s ON s.sku = i.sku
             WHERE i.stock - s.delta < 0
        ) n;
        IF negative IS NOT NULL THEN
            RAISE EXCEPTION 'SKUs % were adjusted by several tenants whose stock cannot be split without a negative share', negative
                USING HINT = 'divide their stock and ledger between the tenants by hand, then migrate again';
        END IF;

    ALTER TABLE inventory_ledger DROP CONSTRAINT inventory_ledger_sku_fkey;
    DROP INDEX inventory_ledger_sku;

    ALTER TABLE invoices DROP CONSTRAINT invoices_order_id_key;
    ALTER TABLE invoices ADD CONSTRAINT invoices_tenant_order_id_key UNIQUE (tenant, order_id);
    ALTER TABLE inventory_items DROP CONSTRAINT inventory_items_pkey;
    ALTER TABLE inventory_items ADD PRIMARY KEY (tenant, sku);
    ALTER TABLE inventory_ledger DROP CONSTRAINT inventory_ledger_pkey;
    ALTER TABLE inventory_ledger ADD PRIMARY KEY (tenant, adjustment_id);
    ALTER TABLE payments DROP CONSTRAINT payments_pkey;
    ALTER TABLE payments ADD PRIMARY KEY (tenant, payment_id);
    ALTER TABLE notifications DROP CONSTRAINT notifications_pkey;
    ALTER TABLE notifications ADD PRIMARY KEY (tenant, dedup_key);

    UPDATE inventory_items i SET stock = i.stock - s.delta, updated_at = now()
      FROM (SELECT sku, sum(delta)::bigint AS delta FROM sku_split GROUP BY sku) s
     WHERE s.sku = i.sku;
    -- The split rows keep the SKU's last token: 00006 copied the SKU's fence
    -- counter to every tenant, so their next adjustment draws a newer one.
    INSERT INTO inventory_items (tenant, sku, initial_stock, stock, fencing_token)
    SELECT tenant, sku, 0, delta, fencing_token FROM sku_split;
    DROP TABLE sku_split;

    ALTER TABLE inventory_ledger ADD CONSTRAINT inventory_ledger_tenant_sku_fkey
        FOREIGN KEY (tenant, sku) REFERENCES inventory_items (tenant, sku);
    CREATE INDEX inventory_ledger_tenant_sku ON inventory_ledger (tenant, sku);
  END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
-- Keys across tenants again. Two tenants' rows with one key cannot both
-- stay, and each is the record of an effect: the Down stops on them (a
-- unique violation) instead of deleting one. A SKU split between tenants
-- becomes one row again, holding their stock together.
ALTER TABLE inventory_ledger DROP CONSTRAINT inventory_ledger_tenant_sku_fkey;
DROP INDEX inventory_ledger_tenant_sku;

CREATE TEMPORARY TABLE sku_merged AS
SELECT sku, sum(initial_stock)::bigint AS initial_stock, sum(stock)::bigint AS stock,
       max(fencing_token) AS fencing_token, max(updated_at) AS updated_at
  FROM inventory_items GROUP BY sku;
DELETE FROM inventory_items;
ALTER TABLE inventory_items DROP CONSTRAINT inventory_items_pkey;
ALTER TABLE inventory_items DROP COLUMN tenant;
ALTER TABLE inventory_items ADD PRIMARY KEY (sku);
INSERT INTO inventory_items (sku, initial_stock, stock, fencing_token, updated_at)
SELECT sku, initial_stock, stock, fencing_token, updated_at FROM sku_merged;
DROP TABLE sku_merged;
-- The merged row keeps the newest token any tenant wrote it with, drawn
-- from a tenant's counter; the SKU's own counter must draw above it, or
-- every adjustment would be refused as stale.
INSERT INTO fencing_tokens AS f (resource, token)
SELECT 'sku:' || sku, fencing_token FROM inventory_items WHERE fencing_token > 0
ON CONFLICT (resource) DO UPDATE SET token = greatest(f.token, excluded.token), updated_at = now();

ALTER TABLE inventory_ledger DROP CONSTRAINT inventory_ledger_pkey;
ALTER TABLE inventory_ledger DROP COLUMN tenant;
ALTER TABLE inventory_ledger ADD PRIMARY KEY (adjustment_id);
ALTER TABLE inventory_ledger ADD CONSTRAINT inventory_ledger_sku_fkey FOREIGN KEY (sku) REFERENCES inventory_items (sku);
CREATE INDEX inventory_ledger_sku ON inventory_ledger (sku);

ALTER TABLE invoices DROP CONSTRAINT invoices_tenant_order_id_key;
ALTER TABLE invoices DROP COLUMN tenant;
ALTER TABLE invoices ADD CONSTRAINT invoices_order_id_key UNIQUE (order_id);
ALTER TABLE payments DROP CONSTRAINT payments_pkey;
ALTER TABLE payments DROP COLUMN tenant;
ALTER TABLE payments ADD PRIMARY KEY (payment_id);
ALTER TABLE notifications DROP CONSTRAINT notifications_pkey;
ALTER TABLE notifications DROP COLUMN tenant;
ALTER TABLE notifications ADD PRIMARY KEY (dedup_key);
