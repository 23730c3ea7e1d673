-- +goose Up
-- One row per running worker process, renewed every worker.heartbeat_interval.
-- A session's turn lease names its worker (planner_sessions.lease_owner); a
-- lease whose worker's row has expired is as good as expired, so a killed
-- worker's turns resume within worker.heartbeat_timeout instead of after the
-- whole lease, with one write per worker per beat rather than per turn.
CREATE TABLE planner_workers (
    id          text PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    beat_at     timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX planner_sessions_leased_idx ON planner_sessions (lease_owner) WHERE lease_owner IS NOT NULL;

-- +goose Down
DROP INDEX planner_sessions_leased_idx;
DROP TABLE planner_workers;
