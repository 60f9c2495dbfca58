-- +goose Up
-- The console's search finds a job by the idempotency key of the request
-- that created it, or by its business key, whatever its tenant and route
-- (an operator holds only the key a customer quotes): one range of each
-- index, not a scan of the table, which at the jobs retention holds
-- millions of rows. The unique (tenant, route, idempotency_key) and the
-- (tenant, business_key) indexes need the tenant first.
CREATE INDEX jobs_idempotency_key ON jobs (idempotency_key);
CREATE INDEX jobs_business_key_search ON jobs (business_key);
-- The console's jobs list filtered by status or by task across tenants:
-- newest first, a page at a time, as the indexes of migration 00017 serve
-- one tenant's (without them a rare status reads most of jobs_created:
-- 386 ms for the failed jobs at 3M rows).
CREATE INDEX jobs_status_created ON jobs (status, created_at DESC, id DESC);
CREATE INDEX jobs_task_created ON jobs (task, created_at DESC, id DESC);

-- +goose Down
DROP INDEX jobs_task_created;
DROP INDEX jobs_status_created;
DROP INDEX jobs_business_key_search;
DROP INDEX jobs_idempotency_key;
