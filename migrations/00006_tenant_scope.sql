-- +goose Up
-- Business keys and resources belong to a tenant: the same order_id from
-- two tenants is two businesses, two jobs and two effects.

-- job_executions: one row per (tenant, business key). Rows written before
-- this migration take the tenant of the earliest job with their business
-- key; a key no job names (a task enqueued by other means) keeps the empty
-- tenant, which is what such a task runs under from now on.
-- payload_sha256 is the SHA-256 of the canonical JSON of the payload that
-- took the key: a second job for the same key with another payload is a
-- conflict, not a replay. Older rows have none and are not compared.
ALTER TABLE job_executions ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE job_executions ADD COLUMN payload_sha256 text;
UPDATE job_executions e
   SET tenant = j.tenant
  FROM (SELECT DISTINCT ON (business_key) business_key, tenant
          FROM jobs ORDER BY business_key, created_at) j
 WHERE j.business_key = e.key;
ALTER TABLE job_executions DROP CONSTRAINT job_executions_pkey;
ALTER TABLE job_executions ADD PRIMARY KEY (tenant, key);

-- Fences: a resource is now named "<tenant>/<resource>" (the worker scopes
-- it; tenant names cannot contain "/"). A tenant's counter must continue
-- above every token already written to its business rows, or its next
-- write would be refused as stale: each existing counter is copied to the
-- scoped name of every tenant that has submitted a job. The unscoped rows
-- stay for tasks without a tenant.
INSERT INTO fencing_tokens (resource, token)
SELECT t.tenant || '/' || f.resource, f.token
  FROM fencing_tokens f CROSS JOIN (SELECT DISTINCT tenant FROM jobs) t
ON CONFLICT (resource) DO NOTHING;
INSERT INTO fence_accepted (resource, token)
SELECT t.tenant || '/' || f.resource, f.token
  FROM fence_accepted f CROSS JOIN (SELECT DISTINCT tenant FROM jobs) t
ON CONFLICT (resource) DO NOTHING;

-- jobs: a business key is looked up per tenant.
DROP INDEX jobs_business_key;
CREATE INDEX jobs_tenant_business_key ON jobs (tenant, business_key);

-- +goose Down
DROP INDEX jobs_tenant_business_key;
CREATE INDEX jobs_business_key ON jobs (business_key);
DELETE FROM fence_accepted WHERE resource LIKE '%/%';
DELETE FROM fencing_tokens WHERE resource LIKE '%/%';
ALTER TABLE job_executions DROP CONSTRAINT job_executions_pkey;
DELETE FROM job_executions a USING job_executions b
 WHERE a.key = b.key AND a.tenant > b.tenant;
ALTER TABLE job_executions ADD PRIMARY KEY (key);
ALTER TABLE job_executions DROP COLUMN payload_sha256;
ALTER TABLE job_executions DROP COLUMN tenant;
