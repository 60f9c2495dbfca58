-- +goose Up
-- pauses holds the work operators (and the flow limits' breakers) have
-- paused: every job of a task, of a queue, or of one key value of a flow
-- limit. A row is in force while it is not resumed and its until (NULL:
-- until resumed) is ahead; a row resumed with a ramp admits a growing
-- share of the work until ramp_until, then means nothing. Workers keep
-- the rows in force in memory: the trigger NOTIFYs idemgate_pauses on
-- every change so that they read them again at once, and they poll too.
-- Rows are led by tenant ('' for an operator's pause, which spans
-- tenants) so that a tenant's own pauses can come later.
CREATE TABLE pauses (
    tenant     text        NOT NULL DEFAULT '',
    kind       text        NOT NULL CHECK (kind IN ('task', 'queue', 'limit')),
    name       text        NOT NULL,
    key        text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    until      timestamptz,
    resumed_at timestamptz,
    ramp_step  double precision CHECK (ramp_step > 0 AND ramp_step <= 1),
    ramp_every_ms bigint    CHECK (ramp_every_ms > 0),
    ramp_until timestamptz,
    created_by text        NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, kind, name, key)
);

-- +goose StatementBegin
CREATE FUNCTION pauses_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('idemgate_pauses', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER pauses_notify AFTER INSERT OR UPDATE OR DELETE ON pauses
    FOR EACH STATEMENT EXECUTE FUNCTION pauses_notify();

-- Ledger outcome 'paused': a delivery a pause sent back, which is not an
-- attempt.
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_outcome_check CHECK (outcome IN
    ('succeeded', 'transient', 'unavailable', 'permanent', 'lock_busy', 'lock_lost', 'stale_token',
     'superseded', 'crashed', 'cancelled', 'limited', 'paused'));

-- +goose Down
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_outcome_check;
DELETE FROM job_attempts WHERE outcome = 'paused';
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_outcome_check CHECK (outcome IN
    ('succeeded', 'transient', 'unavailable', 'permanent', 'lock_busy', 'lock_lost', 'stale_token',
     'superseded', 'crashed', 'cancelled', 'limited'));
DROP TRIGGER pauses_notify ON pauses;
DROP FUNCTION pauses_notify();
DROP TABLE pauses;
