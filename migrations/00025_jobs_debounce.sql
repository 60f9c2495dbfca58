-- +goose Up
-- Debounce (jobs[].debounce): the submits of one task under one debounce
-- key fold into one pending job. debounce_key is the rendered key (NULL
-- for a job that is not debounced); debounce_first_at is the first
-- submit's time, debounce_last_at the latest's, and debounce_until the
-- latest not_before may reach (first_at + max_delay, fixed at the
-- insert). debounce_coalesced counts the submits folded in, from 1; it is
-- also the version of the job's body that the task of each submit
-- carries, so that the worker's take refuses a task that a later submit
-- superseded.
ALTER TABLE jobs ADD COLUMN debounce_key       text,
                 ADD COLUMN debounce_first_at  timestamptz,
                 ADD COLUMN debounce_last_at   timestamptz,
                 ADD COLUMN debounce_until     timestamptz,
                 ADD COLUMN debounce_coalesced integer;
-- One pending job per (tenant, task, debounce key): a job leaves the
-- index when a worker takes it (processing, one attempt counted) or it is
-- cancelled, and the next submit then inserts a new one. A failed job
-- replayed from the dead letters is queued again with its attempts, and
-- stays out. Led by tenant, as every unique key
-- of a tenant's rows is (00018).
CREATE UNIQUE INDEX jobs_debounce_pending ON jobs (tenant, task, debounce_key)
    WHERE debounce_key IS NOT NULL AND status IN ('scheduled', 'queued') AND attempts = 0;

-- +goose Down
DROP INDEX jobs_debounce_pending;
ALTER TABLE jobs DROP COLUMN debounce_coalesced,
                 DROP COLUMN debounce_until,
                 DROP COLUMN debounce_last_at,
                 DROP COLUMN debounce_first_at,
                 DROP COLUMN debounce_key;
