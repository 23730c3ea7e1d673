-- +goose Up
-- A turn keeps the trace context of the send that stored it (W3C
-- traceparent and tracestate, as a JSON object of those headers) so that
-- whichever process enqueues and runs it continues the same trace; and the
-- span context of its latest attempt, so that an attempt that resumes it
-- links to the one it resumes. Both stay NULL while tracing is off. The
-- ready notification carries the trace context to the dispatcher ("x").
ALTER TABLE planner_turns ADD COLUMN trace_context jsonb, ADD COLUMN attempt_trace_context jsonb;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_dispatch_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.finished_at IS NOT NULL THEN
        PERFORM pg_notify('ballet_dispatch', json_build_object('k', 'e', 't', OLD.id)::text);
    ELSE
        PERFORM pg_notify('ballet_dispatch', json_build_object('k', 'r', 't', NEW.id, 's', NEW.session_id,
            'o', (SELECT organization_id FROM projects WHERE id = NEW.project_id), 'p', NEW.project_id,
            'h', NEW.author, 'b', NEW.priority = 'batch', 'd', NEW.enqueued_at IS NOT NULL,
            'q', COALESCE(NEW.request_id, ''), 'x', NEW.trace_context)::text);
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
            'h', NEW.author, 'b', NEW.priority = 'batch', 'd', NEW.enqueued_at IS NOT NULL,
            'q', COALESCE(NEW.request_id, ''))::text);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

ALTER TABLE planner_turns DROP COLUMN trace_context, DROP COLUMN attempt_trace_context;
