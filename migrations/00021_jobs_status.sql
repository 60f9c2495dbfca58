-- +goose Up
-- The console's overview counts jobs by status up to a cap
-- (job.Records.CountByStatusUpTo): each status is an index range read of
-- at most the cap, not a scan of the table, which at the jobs retention
-- holds millions of rows. not_before tells a scheduled job that is due
-- (counted as queued) from one that waits.
CREATE INDEX jobs_status ON jobs (status, not_before);

-- +goose Down
DROP INDEX jobs_status;
