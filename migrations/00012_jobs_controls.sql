-- +goose Up
-- Jobs, round two: a job may wait for its time (scheduled), be cancelled
-- (cancelling while an attempt is in flight, then cancelled), and is
-- deleted with its ledger once it has been final for the jobs retention.
--
-- not_before: when a scheduled job becomes due; computed once, by the
-- insert that records the job, so a retry never moves it.
-- cancel_requested_at: when the first cancel arrived.
-- finished_at: when the job became final (succeeded, failed, cancelled);
-- the retention counts from it. A replayed dead-lettered job clears it.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check CHECK (status IN
    ('scheduled', 'queued', 'processing', 'retrying', 'cancelling', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE jobs
    ADD COLUMN not_before          timestamptz,
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN finished_at         timestamptz;
UPDATE jobs SET finished_at = updated_at WHERE status IN ('succeeded', 'failed');

-- The relay reads every job that has not finished, scheduled and
-- cancelling ones included.
DROP INDEX jobs_unfinished;
CREATE INDEX jobs_unfinished ON jobs (updated_at, id)
    WHERE status IN ('scheduled', 'queued', 'processing', 'retrying', 'cancelling');
-- The retention janitor deletes final jobs oldest first.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- Ledger outcomes: 'cancelled' ends the attempt a cancel stopped (or the
-- HTTP delivery whose answer never came after a cancel); 'limited' is a
-- start refused by a flow-control limit, which is not an attempt.
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_outcome_check CHECK (outcome IN
    ('succeeded', 'transient', 'unavailable', 'permanent', 'lock_busy', 'lock_lost', 'stale_token',
     'superseded', 'crashed', 'cancelled', 'limited'));

-- +goose Down
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_outcome_check;
DELETE FROM job_attempts WHERE outcome IN ('cancelled', 'limited');
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_outcome_check CHECK (outcome IN
    ('succeeded', 'transient', 'unavailable', 'permanent', 'lock_busy', 'lock_lost', 'stale_token',
     'superseded', 'crashed'));
DROP INDEX jobs_finished;
DROP INDEX jobs_unfinished;
CREATE INDEX jobs_unfinished ON jobs (updated_at, id)
    WHERE status IN ('queued', 'processing', 'retrying');
UPDATE jobs SET status = 'queued' WHERE status IN ('scheduled');
UPDATE jobs SET status = 'failed', last_error = COALESCE(last_error, 'cancelled') WHERE status IN ('cancelling', 'cancelled');
ALTER TABLE jobs DROP COLUMN finished_at, DROP COLUMN cancel_requested_at, DROP COLUMN not_before;
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check CHECK (status IN ('queued', 'processing', 'retrying', 'succeeded', 'failed'));
