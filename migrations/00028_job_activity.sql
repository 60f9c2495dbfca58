-- +goose Up
-- The console's activity charts, one row per closed bucket of time: the
-- jobs created in it, those that became succeeded or failed in it, and
-- the p50 and p99 time to a final status of the jobs that became final
-- in it. A bucket is written once, by the first gateway that draws it
-- after it closed (job.Records.Activity, INSERT … ON CONFLICT DO
-- NOTHING), so that every gateway shows the same numbers and none reads
-- a closed bucket's jobs again. The key leads with at so that the jobs
-- retention deletes the buckets past it by a range of the key. The
-- table holds every job of every tenant: no tenant column.
CREATE TABLE job_activity (
    at         timestamptz      NOT NULL,
    width_secs integer          NOT NULL,
    started    bigint           NOT NULL,
    succeeded  bigint           NOT NULL,
    failed     bigint           NOT NULL,
    p50_secs   double precision NOT NULL,
    p99_secs   double precision NOT NULL,
    PRIMARY KEY (at, width_secs)
);

-- +goose Down
DROP TABLE job_activity;
