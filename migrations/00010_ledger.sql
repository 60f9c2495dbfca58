-- +goose Up
-- The ledger: what happened, attempt by attempt, so that an operator can
-- prove it later (idemgate explain). job_executions and
-- idempotency_records hold only the latest state; these tables keep the
-- history. Both are written by the statements that already change that
-- state, so they cost no commit of their own.

-- job_attempts: one row per attempt of a job (workers/execution). Take
-- inserts it with the attempt's fencing token; the Mark* statements end it
-- with its outcome. An attempt a later one finds unfinished is 'crashed'.
-- 'lock_busy' rows have no token: the attempt never took the resource.
CREATE TABLE job_attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        text NOT NULL DEFAULT '',
    tenant        text NOT NULL,
    key           text NOT NULL,
    task          text NOT NULL,
    resource      text NOT NULL,
    attempt       integer NOT NULL CHECK (attempt >= 0),
    fencing_token bigint,
    worker        text NOT NULL DEFAULT '',
    started_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    outcome       text CHECK (outcome IN ('succeeded', 'transient', 'unavailable', 'permanent', 'lock_busy',
                                          'lock_lost', 'stale_token', 'superseded', 'crashed')),
    error         text,
    CHECK ((outcome IS NULL) = (ended_at IS NULL))
);
CREATE INDEX job_attempts_key ON job_attempts (tenant, key, fencing_token);
CREATE INDEX job_attempts_job ON job_attempts (job_id);
-- The janitor deletes ended rows older than the retention, oldest first.
CREATE INDEX job_attempts_ended ON job_attempts (ended_at) WHERE ended_at IS NOT NULL;

-- idempotency_claims: one row per claim of an idempotency record (pgstore),
-- written in the batch that claims; completing, releasing, holding as
-- unknown or taking it over ends it. Deleted with its record.
CREATE TABLE idempotency_claims (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        text NOT NULL,
    route         text NOT NULL,
    key           text NOT NULL,
    fencing_token bigint NOT NULL,
    owner         text NOT NULL,
    instance      text NOT NULL DEFAULT '',
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    outcome       text CHECK (outcome IN ('completed', 'released', 'unknown', 'taken_over', 'refused', 'resolved', 'deleted')),
    reason        text,
    status        integer
);
CREATE INDEX idempotency_claims_key ON idempotency_claims (tenant, route, key, fencing_token);

-- +goose Down
DROP TABLE idempotency_claims;
DROP TABLE job_attempts;
