-- +goose Up
-- Final-status callbacks and retention.
--
-- job_callbacks is the outbox of final-status callbacks: one row per
-- final status of a job whose task declares on_final. seq is 1 for the
-- job's first final status and grows when a job replayed from the
-- dead-letter queue ends again; the webhook-id derives from it. A worker's
-- dispatcher claims due rows (FOR UPDATE SKIP LOCKED), which counts the
-- attempt and moves due_at past the send's timeout: a worker that dies
-- after sending leaves the row due again, and it is sent again with the
-- same webhook-id. body is the signed event, fixed when the row is made,
-- so every attempt sends the same bytes.
CREATE TABLE job_callbacks (
    job_id       text NOT NULL,
    seq          integer NOT NULL CHECK (seq > 0),
    task         text NOT NULL,
    event        text NOT NULL CHECK (event IN ('job.succeeded', 'job.failed', 'job.cancelled')),
    body         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    due_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    delivered_at timestamptz,
    abandoned_at timestamptz,
    last_status  integer,
    last_error   text,
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX job_callbacks_due ON job_callbacks (due_at) WHERE delivered_at IS NULL AND abandoned_at IS NULL;

-- job_callback_attempts: the ledger of callback attempts, one row per
-- POST (idemgate explain shows them). outcome: 'delivered' (2xx),
-- 'retry' (another attempt is due), 'abandoned' (the bound is reached).
CREATE TABLE job_callback_attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      text NOT NULL,
    seq         integer NOT NULL,
    attempt     integer NOT NULL CHECK (attempt > 0),
    worker      text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz NOT NULL DEFAULT now(),
    status      integer,
    outcome     text NOT NULL CHECK (outcome IN ('delivered', 'retry', 'abandoned')),
    error       text
);
CREATE INDEX job_callback_attempts_job ON job_callback_attempts (job_id, seq, attempt);

-- jobs.callback_for is the finished_at whose callback job_callbacks holds.
-- A final job whose finished_at differs from it has a callback to make,
-- if its task declares one; the index serves that lookup by task.
ALTER TABLE jobs ADD COLUMN callback_for timestamptz;
CREATE INDEX jobs_callback_pending ON jobs (task, finished_at)
    WHERE finished_at IS NOT NULL AND callback_for IS DISTINCT FROM finished_at;

-- The attempt ledger lives as long as its job: the jobs retention deletes
-- a job's rows with it. Rows of tasks enqueued without a job (job_id '')
-- follow the executions' retention, read along this index.
DROP INDEX job_attempts_ended;
CREATE INDEX job_attempts_jobless ON job_attempts (ended_at) WHERE job_id = '' AND ended_at IS NOT NULL;

-- The executions retention deletes final executions oldest first.
CREATE INDEX job_executions_finished ON job_executions (finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');

-- +goose Down
DROP INDEX job_executions_finished;
DROP INDEX job_attempts_jobless;
CREATE INDEX job_attempts_ended ON job_attempts (ended_at) WHERE ended_at IS NOT NULL;
DROP INDEX jobs_callback_pending;
ALTER TABLE jobs DROP COLUMN callback_for;
DROP TABLE job_callback_attempts;
DROP TABLE job_callbacks;
