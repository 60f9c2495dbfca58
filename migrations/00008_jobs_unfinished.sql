-- +goose Up
-- The relay (package enqueue) reads the jobs that have not finished, oldest
-- record first, to check that asynq still holds their tasks. Finished jobs
-- are most of the table and stay out of the index.
CREATE INDEX jobs_unfinished ON jobs (updated_at, id)
    WHERE status IN ('queued', 'processing', 'retrying');

-- +goose Down
DROP INDEX jobs_unfinished;
