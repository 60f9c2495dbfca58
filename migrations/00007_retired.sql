-- +goose Up
-- This version once gave the example jobs' tables their tenant. It is the
-- examples' own now (examples/migrations/00002_tenant.sql), and does
-- nothing here: see 00004_retired.sql.
SELECT 1;

-- +goose Down
SELECT 1;
