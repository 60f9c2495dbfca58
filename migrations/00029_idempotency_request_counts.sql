-- +goose Up
-- How many requests each key received, by kind, and when the first and the
-- last of them ended (pgstore.Store.AddRequests, the console's key page).
-- They are columns of the record so that they live exactly as long as it:
-- the janitor and Delete remove them with the row, and a claim that
-- creates the record afresh over an expired row sets them back to zero.
-- New columns with constant defaults are instant: existing rows are not
-- rewritten.
ALTER TABLE idempotency_records
    ADD COLUMN requests_new      bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_replayed bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_conflict bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_mismatch bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_released bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_first_at timestamptz,
    ADD COLUMN requests_last_at  timestamptz;

-- +goose Down
ALTER TABLE idempotency_records
    DROP COLUMN requests_new,
    DROP COLUMN requests_replayed,
    DROP COLUMN requests_conflict,
    DROP COLUMN requests_mismatch,
    DROP COLUMN requests_released,
    DROP COLUMN requests_first_at,
    DROP COLUMN requests_last_at;
