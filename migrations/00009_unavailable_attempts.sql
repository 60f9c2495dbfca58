-- +goose Up
-- job_executions.attempt_count counts real attempts only: an attempt that
-- found a dependency unavailable (workers.Unavailable) is given back when it
-- ends (execution.Store.MarkUnavailable), so a job whose every attempt so far
-- found its partner down has 0.
ALTER TABLE job_executions DROP CONSTRAINT job_executions_attempt_count_check;
ALTER TABLE job_executions ADD CONSTRAINT job_executions_attempt_count_check CHECK (attempt_count >= 0);

-- +goose Down
UPDATE job_executions SET attempt_count = 1 WHERE attempt_count = 0;
ALTER TABLE job_executions DROP CONSTRAINT job_executions_attempt_count_check;
ALTER TABLE job_executions ADD CONSTRAINT job_executions_attempt_count_check CHECK (attempt_count > 0);
