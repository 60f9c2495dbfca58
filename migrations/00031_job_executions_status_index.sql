-- +goose Up
-- No query reads job_executions by (status, updated_at): every read and
-- write of the worker names the row by its key (tenant, key), and the
-- retention reads the final rows through job_executions_finished. The
-- index was worse than unused. With almost every row succeeded, the
-- planner judged status = 'processing' as selective as the primary key
-- and chose this index for the worker's own updates (a job's completion,
-- the take's release of a cancelled job). Each completion then walked
-- every 'processing' entry, live and dead, left by the jobs completed
-- since the last vacuum: the busier the worker, the longer the walk. It
-- also cost every job two index entries.
DROP INDEX job_executions_status_updated_at;

-- +goose Down
CREATE INDEX job_executions_status_updated_at ON job_executions (status, updated_at);
