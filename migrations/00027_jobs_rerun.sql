-- +goose Up
-- An operator re-runs a cancelled or failed job as a new job (the
-- console's "Re-run as a new job"). The new job's rerun_of names the job
-- it re-runs; the old job finds its re-runs through jobs_rerun_of, which
-- holds only the rows of re-runs. Adding a nullable column rewrites
-- nothing.
ALTER TABLE jobs ADD COLUMN rerun_of text;
CREATE INDEX jobs_rerun_of ON jobs (rerun_of) WHERE rerun_of IS NOT NULL;

-- +goose Down
DROP INDEX jobs_rerun_of;
ALTER TABLE jobs DROP COLUMN rerun_of;
