-- +goose Up
-- Retention (worker/retention*.go): outputs of ended turns, usage detail and
-- the event log are deleted after their [retention] window, in small
-- batches, each its own short transaction, found through these indexes.

-- Outputs are found by age; the batch keeps those of turns not yet ended.
CREATE INDEX planner_outputs_created_idx ON planner_outputs (created_at);
-- Usage detail rows are rolled up into usage_daily by age.
CREATE INDEX usage_created_idx ON usage (created_at);
-- Events are found by age.
CREATE INDEX events_occurred_idx ON events (occurred_at);

-- usage_daily holds the usage detail rows older than retention.usage_detail,
-- summed per UTC day and per what a usage report groups by (model, caller,
-- day), so that every report gives the same totals after the rollup. A
-- detail row moves here in the transaction that deletes it: never counted
-- twice, never lost.
CREATE TABLE usage_daily (
    organization_id     uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id          uuid REFERENCES projects(id) ON DELETE CASCADE,
    day                 date NOT NULL,
    caller              text NOT NULL,
    provider            text NOT NULL,
    model               text NOT NULL,
    requests            bigint NOT NULL DEFAULT 0 CHECK (requests >= 0),
    input_tokens        bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens       bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cache_read_tokens   bigint NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
    cache_write_tokens  bigint NOT NULL DEFAULT 0 CHECK (cache_write_tokens >= 0),
    estimated           bigint NOT NULL DEFAULT 0 CHECK (estimated >= 0),
    duration_ms         bigint NOT NULL DEFAULT 0,
    CONSTRAINT usage_daily_key UNIQUE NULLS NOT DISTINCT (organization_id, project_id, day, caller, provider, model)
);
CREATE INDEX usage_daily_project_day_idx ON usage_daily (project_id, day);

-- event_horizons is, per organization, the highest event number deleted:
-- a replay from before it cannot be complete and is answered
-- resync_required.
CREATE TABLE event_horizons (
    organization_id  uuid PRIMARY KEY REFERENCES organizations(id) ON DELETE CASCADE,
    pruned_through   bigint NOT NULL CHECK (pruned_through >= 1)
);

-- retention_state is the last period a retention run claimed: one run per
-- retention.interval however many workers schedule it.
CREATE TABLE retention_state (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_period  timestamptz NOT NULL
);

-- The event log stays append-only, except for the retention run, which
-- sets ballet.retention in its own transaction to delete old events.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('ballet.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only';
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END;
$$;
-- +goose StatementEnd
DROP TABLE retention_state, event_horizons, usage_daily;
DROP INDEX events_occurred_idx;
DROP INDEX usage_created_idx;
DROP INDEX planner_outputs_created_idx;
