-- +goose Up
-- schedules holds the recurring schedules: those the configuration
-- declares (source config, written at each start) and those tenants
-- create through PUT /v1/schedules/{id} (source api). spec is the cron
-- expression, or "@every" and an interval; zone the IANA zone the cron
-- expression is read in. next_fire_at is the first slot not yet handled:
-- the scheduler takes the rows it has passed, records their slots and
-- moves it on, in one transaction.
CREATE TABLE schedules (
    tenant         text        NOT NULL,
    id             text        NOT NULL,
    task           text        NOT NULL,
    spec           text        NOT NULL,
    zone           text        NOT NULL DEFAULT 'UTC',
    body           jsonb       NOT NULL,
    overlap        text        NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'buffer_one', 'allow')),
    catchup        text        NOT NULL DEFAULT 'none' CHECK (catchup IN ('none', 'one', 'all')),
    catchup_window interval    NOT NULL DEFAULT '0',
    jitter         interval    NOT NULL DEFAULT '0',
    paused         boolean     NOT NULL DEFAULT false,
    next_fire_at   timestamptz NOT NULL,
    source         text        NOT NULL CHECK (source IN ('config', 'api')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, id)
);
CREATE INDEX schedules_due ON schedules (next_fire_at);

-- schedule_slots is the history of a schedule's slots: one row per slot
-- the scheduler handled, the nominal time before jitter. A fired slot
-- names its job (a jobs row whose id derives from tenant, schedule id
-- and slot), whose status is the slot's outcome; a skipped one says why
-- (overlap, missed, paused). Two schedulers, or a backfill over a slot
-- that fired, meet on the primary key. The scheduler deletes a
-- schedule's rows older than the jobs retention as it goes.
CREATE TABLE schedule_slots (
    tenant      text        NOT NULL,
    schedule_id text        NOT NULL,
    slot        timestamptz NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('fired', 'skipped_overlap', 'skipped_missed', 'skipped_paused')),
    job_id      text,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, schedule_id, slot)
);

-- +goose Down
DROP TABLE schedule_slots;
DROP TABLE schedules;
