-- +goose Up
-- Wakes the gateways' waits (GET /v1/jobs/{id}?wait=): every change of
-- a job's document NOTIFYs the channel idemgate_jobs with the job's id.
-- A trigger, not the statements that write, so that no writer (the
-- worker's status reports, a cancel, a dead-letter replay, an operator's
-- UPDATE) can forget it. An update that leaves the document as it was
-- (a write of the same status by a late report that changes nothing)
-- notifies nobody.
--
-- The cost: a transaction that notifies takes, at commit, a lock that
-- serialises the commits of every notifying transaction in the database
-- (not those of others). A job's document changes a few times in its
-- life (processing, then its outcome; a retry or a cancel more), so the
-- jobs' writes pay it a few times per job. The idempotency records, which
-- change on every request, notify only when watched (migration 00005);
-- the jobs' changes are rare enough not to need that.
-- +goose StatementBegin
CREATE FUNCTION jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('idemgate_jobs', NEW.id);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER jobs_notify AFTER UPDATE ON jobs FOR EACH ROW
    WHEN ((OLD.status, OLD.attempts, OLD.result_ref, OLD.last_error, OLD.updated_at,
           OLD.not_before, OLD.cancel_requested_at, OLD.finished_at)
          IS DISTINCT FROM
          (NEW.status, NEW.attempts, NEW.result_ref, NEW.last_error, NEW.updated_at,
           NEW.not_before, NEW.cancel_requested_at, NEW.finished_at))
    EXECUTE FUNCTION jobs_notify();

-- +goose Down
DROP TRIGGER jobs_notify ON jobs;
DROP FUNCTION jobs_notify();
