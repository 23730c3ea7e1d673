-- +goose Up
-- The counters moved at commit are found by UPDATE, not by INSERT … ON
-- CONFLICT DO UPDATE: the row exists on every commit but an organization's
-- first event (or a project shard's first queued turn), and an upsert pays a
-- speculative insertion check (an index probe, and under contention a wait
-- and a second probe) before it updates. The insert is the fallback when
-- the UPDATE found no row. Each trigger also runs one statement where it ran
-- two or three: the counter's UPDATE feeds the number row's INSERT and the
-- NOTIFY in one statement; the project's counter and the total move in one.
-- Locks are taken in the order they were: the organization's counter, then
-- the number row; the project's shard, then the total's.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_number() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    WITH c AS (
        UPDATE organization_event_counters SET last_seq = last_seq + 1
        WHERE organization_id = NEW.organization_id RETURNING last_seq
    ), num AS (
        INSERT INTO event_numbers (seq, organization_id, org_seq, project_id)
        SELECT NEW.seq, NEW.organization_id, c.last_seq, NEW.project_id FROM c
        RETURNING org_seq
    )
    SELECT num.org_seq INTO n
    FROM num, LATERAL pg_notify('ballet_events', NEW.organization_id::text || ':' || num.org_seq::text) AS notified;
    IF n IS NULL THEN
        -- The organization's first event: its counter row is made here.
        INSERT INTO organization_event_counters AS c (organization_id, last_seq)
        VALUES (NEW.organization_id, 1)
        ON CONFLICT (organization_id) DO UPDATE SET last_seq = c.last_seq + 1
        RETURNING last_seq INTO n;
        INSERT INTO event_numbers (seq, organization_id, org_seq, project_id)
        VALUES (NEW.seq, NEW.organization_id, n, NEW.project_id);
        PERFORM pg_notify('ballet_events', NEW.organization_id::text || ':' || n::text);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta bigint := 0;
    project uuid;
    session uuid;
    sh smallint;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'queued' THEN
        delta := delta - 1;
        project := OLD.project_id;
        session := OLD.session_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'queued' THEN
        delta := delta + 1;
        project := NEW.project_id;
        session := NEW.session_id;
    END IF;
    IF delta = 0 THEN
        RETURN NULL;
    END IF;
    sh := planner_queue_shard(session);
    -- The project's shard first (the subquery runs before the total's
    -- update), then the total.
    WITH c AS (
        UPDATE planner_queue_counts SET queued = queued + delta
        WHERE project_id = project AND shard = sh RETURNING 1
    )
    UPDATE planner_queue_total SET queued = queued + delta
    WHERE shard = sh AND EXISTS (SELECT 1 FROM c);
    IF NOT FOUND THEN
        -- No row for the project's shard: its first queued turn, or its
        -- project is being deleted. The total moves all the same.
        IF delta > 0 THEN
            INSERT INTO planner_queue_counts AS c (project_id, shard, queued)
            VALUES (project, sh, delta)
            ON CONFLICT (project_id, shard) DO UPDATE SET queued = c.queued + EXCLUDED.queued;
        END IF;
        UPDATE planner_queue_total SET queued = queued + delta WHERE shard = sh;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta bigint := 0;
    project uuid;
    session uuid;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'queued' THEN
        delta := delta - 1;
        project := OLD.project_id;
        session := OLD.session_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'queued' THEN
        delta := delta + 1;
        project := NEW.project_id;
        session := NEW.session_id;
    END IF;
    IF delta > 0 THEN
        INSERT INTO planner_queue_counts AS c (project_id, shard, queued)
        VALUES (project, planner_queue_shard(session), delta)
        ON CONFLICT (project_id, shard) DO UPDATE SET queued = c.queued + EXCLUDED.queued;
    ELSIF delta < 0 THEN
        UPDATE planner_queue_counts SET queued = queued + delta
        WHERE project_id = project AND shard = planner_queue_shard(session);
    END IF;
    IF delta <> 0 THEN
        UPDATE planner_queue_total SET queued = queued + delta WHERE shard = planner_queue_shard(session);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_number() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    INSERT INTO organization_event_counters AS c (organization_id, last_seq)
    VALUES (NEW.organization_id, 1)
    ON CONFLICT (organization_id) DO UPDATE SET last_seq = c.last_seq + 1
    RETURNING last_seq INTO n;
    INSERT INTO event_numbers (seq, organization_id, org_seq, project_id)
    VALUES (NEW.seq, NEW.organization_id, n, NEW.project_id);
    PERFORM pg_notify('ballet_events', NEW.organization_id::text || ':' || n::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
