-- +goose Up
-- One row per (tenant, route, key). Owned by middleware/idempotency/pgstore.
CREATE TABLE idempotency_records (
    tenant           text        NOT NULL,
    route            text        NOT NULL,
    key              text        NOT NULL,
    fingerprint      text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('in_flight', 'completed', 'released', 'unknown')),
    -- The attempt that holds the claim (in_flight) or held it last. It is
    -- kept when the claim ends so that an owner retrying a write whose answer
    -- was lost with its connection recognises its own write.
    owner            text        NOT NULL,
    fencing_token    bigint      NOT NULL CHECK (fencing_token > 0),
    lease_until      timestamptz,
    response_status  integer,
    response_headers jsonb,
    response_body    bytea,
    body_omitted     boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant, route, key),
    CHECK (state <> 'in_flight' OR lease_until IS NOT NULL),
    CHECK (state <> 'completed' OR response_status IS NOT NULL)
);

-- The janitor deletes expired rows oldest first, in bounded batches.
CREATE INDEX idempotency_records_expires_at ON idempotency_records (expires_at);

-- +goose Down
DROP TABLE idempotency_records;
