-- +goose Up
-- A cancelled job releases its business key as a failed one does: its
-- execution row ends 'cancelled', and a new job with the same key (and
-- any payload) takes it over from attempt 1. Written by the attempt a
-- cancel stopped (workers/execution MarkCancelled), by a take refused
-- because the job was cancelled, and by the cancel of a job between
-- attempts (job.Records.Cancel).
ALTER TABLE job_executions DROP CONSTRAINT job_executions_status_check;
ALTER TABLE job_executions ADD CONSTRAINT job_executions_status_check CHECK (status IN
    ('processing', 'succeeded', 'failed', 'cancelled'));

-- +goose Down
UPDATE job_executions SET status = 'failed', last_error = COALESCE(last_error, 'cancelled') WHERE status = 'cancelled';
ALTER TABLE job_executions DROP CONSTRAINT job_executions_status_check;
ALTER TABLE job_executions ADD CONSTRAINT job_executions_status_check CHECK (status IN ('processing', 'succeeded', 'failed'));
