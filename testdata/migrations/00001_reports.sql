-- +goose Up
-- The table of a program's extension in the root package's tests.
CREATE TABLE reports (
    tenant    text NOT NULL,
    report_id text NOT NULL,
    PRIMARY KEY (tenant, report_id)
);

-- +goose Down
DROP TABLE reports;
