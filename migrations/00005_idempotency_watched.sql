-- +goose Up
-- Set when a duplicate request waits for the record (wait_in_flight): only
-- then do Complete, Release and MarkUnknown send a NOTIFY. A NOTIFY takes a
-- database-wide lock at commit, which would otherwise serialise every
-- commit of every request. A new column with a constant default is
-- instant: existing rows are not rewritten.
ALTER TABLE idempotency_records ADD COLUMN watched boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE idempotency_records DROP COLUMN watched;
