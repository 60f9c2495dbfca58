-- +goose Up
-- The console's overview counts jobs by status up to a cap
-- (job.Records.CountByStatusUpTo): each status is a range of this index
-- read no further than the cap, not a scan of the table, which at the
-- jobs retention holds millions of rows; not_before, included, tells a
-- scheduled job that is due (counted as queued) from one that waits. The
-- stuck-jobs check (reconcile) reads the unfinished jobs unchanged since
-- its cutoff as ranges of (status, updated_at), not every unfinished job.
CREATE INDEX jobs_status ON jobs (status, updated_at) INCLUDE (not_before);

-- +goose Down
DROP INDEX jobs_status;
