-- +goose Up
-- One strictly increasing counter per resource. Owned by workers/fence: the
-- token a worker draws each time it takes a resource's lock.
CREATE TABLE fencing_tokens (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The newest token a fenced write has been accepted with, per resource.
-- Owned by workers/fence (fence.Check).
CREATE TABLE fence_accepted (
    resource    text        PRIMARY KEY,
    token       bigint      NOT NULL CHECK (token > 0),
    accepted_at timestamptz NOT NULL DEFAULT now()
);

-- Execution state of idempotent jobs, one row per business key (never per
-- attempt). Owned by workers/execution. A succeeded row is final.
CREATE TABLE job_executions (
    key           text        PRIMARY KEY,
    task          text        NOT NULL,
    resource      text        NOT NULL,
    status        text        NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
    result_ref    text,
    attempt_count integer     NOT NULL CHECK (attempt_count > 0),
    fencing_token bigint      NOT NULL CHECK (fencing_token > 0),
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);

-- Operators look for work stuck in processing, oldest first.
CREATE INDEX job_executions_status_updated_at ON job_executions (status, updated_at);

-- +goose Down
DROP TABLE job_executions;
DROP TABLE fence_accepted;
DROP TABLE fencing_tokens;
