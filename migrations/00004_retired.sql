-- +goose Up
-- This version once created the example jobs' tables (invoices,
-- inventory_items, inventory_ledger, payments, notifications). They are
-- the examples' own now: idemgate-examples creates them with migrations of
-- its own (examples/migrations, version table idemgate_examples_version),
-- and idemgate's schema holds nothing of the examples. The version stays so
-- that the numbering of a database migrated before does not move; a
-- database that holds the tables keeps them, untouched, both ways.
SELECT 1;

-- +goose Down
SELECT 1;
