-- +goose Up
-- One row per accepted enqueue request. Owned by package enqueue; the
-- worker keeps status, attempts and result_ref current. The id is the
-- asynq TaskID, derived from (tenant, route, idempotency key), so a retry
-- can never create a second task.
CREATE TABLE jobs (
    id              text        PRIMARY KEY,
    tenant          text        NOT NULL,
    route           text        NOT NULL,
    idempotency_key text        NOT NULL,
    task            text        NOT NULL,
    queue           text        NOT NULL,
    business_key    text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'processing', 'retrying', 'succeeded', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    result_ref      text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, route, idempotency_key)
);

CREATE INDEX jobs_failed ON jobs (updated_at) WHERE status = 'failed';
CREATE INDEX jobs_business_key ON jobs (business_key);

-- +goose Down
DROP TABLE jobs;
