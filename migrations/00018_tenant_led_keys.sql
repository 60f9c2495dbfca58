-- +goose Up
-- The ledger tables' primary keys lead with the tenant, as every other
-- key of a tenant's rows does, so that they can be distributed by tenant
-- (Citus requires the distribution column in every primary key and unique
-- constraint) or split over databases by a tenant→shard map. Nothing
-- looks a row up by its id alone, nothing references these ids, and no
-- ON CONFLICT names these keys: rows are found by (tenant, key, fencing
-- token) and (tenant, route, key, fencing token), through their own
-- indexes, and ordered by id within them. The id stays an identity, so
-- it stays unique. Rebuilding a primary key reads the table once and
-- holds its writes meanwhile: a ledger the retention janitor keeps
-- bounded takes seconds.
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_pkey, ADD PRIMARY KEY (tenant, id);
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_pkey, ADD PRIMARY KEY (tenant, id);

-- +goose Down
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_pkey, ADD PRIMARY KEY (id);
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_pkey, ADD PRIMARY KEY (id);
