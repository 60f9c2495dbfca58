-- +goose Up
-- One row per accepted batch submit (POST to a route's batch path). The
-- id derives from (tenant, batch route, Idempotency-Key) as a job's does,
-- so a retry that takes over the batch's claim writes no second row.
-- job_ids lists every accepted item's job in item order, those the batch
-- created and those an earlier request with the item's key had: GET
-- /v1/batches/{id} counts their statuses. A job the batch created names
-- it in jobs.batch_id.
CREATE TABLE batches (
    tenant          text        NOT NULL,
    id              text        NOT NULL,
    route           text        NOT NULL,
    idempotency_key text        NOT NULL,
    items           integer     NOT NULL,
    job_ids         text[]      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, id)
);

-- A new nullable column is instant: existing rows are not rewritten.
ALTER TABLE jobs ADD COLUMN batch_id text;
CREATE INDEX jobs_batch ON jobs (tenant, batch_id) WHERE batch_id IS NOT NULL;

-- +goose Down
DROP INDEX jobs_batch;
ALTER TABLE jobs DROP COLUMN batch_id;
DROP TABLE batches;
