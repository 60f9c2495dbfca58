-- +goose Up
-- Listing jobs (GET /v1/jobs, GET /admin/jobs, the console): newest
-- first, a page at a time after a (created_at, id) cursor. Each index
-- below hands a page over in that order, so a page reads its own rows
-- and no more, however many jobs the table holds: a tenant's jobs, a
-- tenant's jobs in one status (a due scheduled job reads as queued: that
-- filter merges the queued and scheduled ranges of this index), a
-- tenant's jobs of one task, and every tenant's jobs for an operator.
-- A task and a status together read the task's range and filter it.
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_tenant_status_created ON jobs (tenant, status, created_at DESC, id DESC);
CREATE INDEX jobs_tenant_task_created ON jobs (tenant, task, created_at DESC, id DESC);
CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);

-- +goose Down
DROP INDEX jobs_created;
DROP INDEX jobs_tenant_task_created;
DROP INDEX jobs_tenant_status_created;
DROP INDEX jobs_tenant_created;
