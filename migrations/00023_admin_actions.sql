-- +goose Up
-- admin_actions is the audit trail of what operators did through the
-- admin API and the console: one row per target of an action (a job, or
-- an idempotency key), so that a bulk action over 20 jobs writes 20 rows
-- sharing one action_id, and a job's timeline finds its rows by job id.
-- actor is who (the HTTP Basic user name, or "admin token" for a bearer
-- token), filter the query a bulk action selected its jobs by, reason
-- what the operator typed. Rows are led by the target's tenant ('' for
-- an action with none) and kept as long as jobs are: the retention
-- janitor deletes the rows older than the jobs retention, oldest first,
-- through admin_actions_at.
CREATE TABLE admin_actions (
    tenant    text        NOT NULL DEFAULT '',
    id        bigint      GENERATED ALWAYS AS IDENTITY,
    action_id bigint      NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    actor     text        NOT NULL,
    action    text        NOT NULL,
    via       text        NOT NULL DEFAULT '',
    job_id    text,
    route     text,
    idempotency_key text,
    filter    text        NOT NULL DEFAULT '',
    reason    text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, id)
);
CREATE INDEX admin_actions_job ON admin_actions (job_id, id) WHERE job_id IS NOT NULL;
CREATE INDEX admin_actions_key ON admin_actions (tenant, route, idempotency_key, id) WHERE idempotency_key IS NOT NULL;
CREATE INDEX admin_actions_at ON admin_actions (at);
CREATE SEQUENCE admin_actions_action_id;

-- +goose Down
DROP SEQUENCE admin_actions_action_id;
DROP TABLE admin_actions;
