-- +goose Up
-- A job's changes NOTIFY only while a gateway waits for it (GET
-- /v1/jobs/{id}?wait=, If-None-Match): job.Watcher.Watch sets watched
-- before it reads the job, as the idempotency records do (00005). A
-- transaction that notifies takes, at commit, a lock that serialises the
-- commits of every notifying transaction in the database, WAL flush
-- included. With every job's start and success notifying, the workers'
-- commits went one at a time, and concurrent jobs could never share a WAL
-- flush: measured at 50 concurrent jobs, 1.1 WAL flushes per job with the
-- trigger on every change, 0.6 without it. A new column with a constant
-- default is instant: existing rows are not rewritten.
ALTER TABLE jobs ADD COLUMN watched boolean NOT NULL DEFAULT false;
DROP TRIGGER jobs_notify ON jobs;
CREATE TRIGGER jobs_notify AFTER UPDATE ON jobs FOR EACH ROW
    WHEN (NEW.watched AND
          (OLD.status, OLD.attempts, OLD.result_ref, OLD.last_error, OLD.updated_at,
           OLD.not_before, OLD.cancel_requested_at, OLD.finished_at)
          IS DISTINCT FROM
          (NEW.status, NEW.attempts, NEW.result_ref, NEW.last_error, NEW.updated_at,
           NEW.not_before, NEW.cancel_requested_at, NEW.finished_at))
    EXECUTE FUNCTION jobs_notify();

-- +goose Down
DROP TRIGGER jobs_notify ON jobs;
CREATE TRIGGER jobs_notify AFTER UPDATE ON jobs FOR EACH ROW
    WHEN ((OLD.status, OLD.attempts, OLD.result_ref, OLD.last_error, OLD.updated_at,
           OLD.not_before, OLD.cancel_requested_at, OLD.finished_at)
          IS DISTINCT FROM
          (NEW.status, NEW.attempts, NEW.result_ref, NEW.last_error, NEW.updated_at,
           NEW.not_before, NEW.cancel_requested_at, NEW.finished_at))
    EXECUTE FUNCTION jobs_notify();
ALTER TABLE jobs DROP COLUMN watched;
