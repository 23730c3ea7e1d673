-- +goose Up
-- The dispatcher no longer marks a turn dispatched in Postgres: it enqueues
-- the task and keeps in memory what it dispatched, and the worker's claim
-- sets enqueued_at in the statement it runs anyway. So that the task
-- carries the request that sent the turn, the ready notification carries
-- it too ("q").
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_dispatch_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.finished_at IS NOT NULL THEN
        PERFORM pg_notify('ballet_dispatch', json_build_object('k', 'e', 't', OLD.id)::text);
    ELSE
        PERFORM pg_notify('ballet_dispatch', json_build_object('k', 'r', 't', NEW.id, 's', NEW.session_id,
            'o', (SELECT organization_id FROM projects WHERE id = NEW.project_id), 'p', NEW.project_id,
            'h', NEW.author, 'b', NEW.priority = 'batch', 'd', NEW.enqueued_at IS NOT NULL,
            'q', COALESCE(NEW.request_id, ''))::text);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_dispatch_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.finished_at IS NOT NULL THEN
        PERFORM pg_notify('ballet_dispatch', json_build_object('k', 'e', 't', OLD.id)::text);
    ELSE
        PERFORM pg_notify('ballet_dispatch', json_build_object('k', 'r', 't', NEW.id, 's', NEW.session_id,
            'o', (SELECT organization_id FROM projects WHERE id = NEW.project_id), 'p', NEW.project_id,
            'h', NEW.author, 'b', NEW.priority = 'batch', 'd', NEW.enqueued_at IS NOT NULL)::text);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
