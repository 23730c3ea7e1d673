-- +goose Up
-- Fair scheduling. A session's next turn is first *ready* (ready_at set, in
-- the transaction that made it the session's next: send, finish, cancel),
-- then *dispatched* (enqueued_at set) by the dispatcher, which hands free
-- worker slots to ready turns across organizations, their projects and the
-- humans who sent them, by weight and under caps; only a dispatched turn
-- has a task in the asynq queue. With scheduler.mode = "fifo" a turn is
-- dispatched as it becomes ready, in the same statement.
ALTER TABLE planner_turns
    ADD COLUMN ready_at timestamptz,
    ADD COLUMN priority text NOT NULL DEFAULT 'interactive' CHECK (priority IN ('interactive', 'batch')),
    -- The api request that sent the turn, for the task the dispatcher
    -- enqueues (its log lines and gateway calls carry it).
    ADD COLUMN request_id text;
-- Turns already marked enqueued have their task: they are dispatched.
UPDATE planner_turns SET ready_at = enqueued_at WHERE finished_at IS NULL AND enqueued_at IS NOT NULL;

-- The dispatcher's backlog: ready turns not yet dispatched. Its in-flight
-- turns (dispatched, not ended) are planner_turns_due_heads_idx.
CREATE INDEX planner_turns_ready_idx ON planner_turns (ready_at)
    WHERE finished_at IS NULL AND ready_at IS NOT NULL AND enqueued_at IS NULL;

-- Weights (default 1) and caps (NULL: the [scheduler] default; 0: no cap).
-- An organization's weight and caps are a platform admin's to set, a
-- project's an organization admin's.
ALTER TABLE organizations
    ADD COLUMN scheduling_weight integer NOT NULL DEFAULT 1 CHECK (scheduling_weight BETWEEN 1 AND 1000),
    ADD COLUMN max_running_turns integer CHECK (max_running_turns >= 0),
    ADD COLUMN max_running_turns_per_human integer CHECK (max_running_turns_per_human >= 0),
    ADD COLUMN max_queued_turns integer CHECK (max_queued_turns >= 0);
ALTER TABLE projects
    ADD COLUMN scheduling_weight integer NOT NULL DEFAULT 1 CHECK (scheduling_weight BETWEEN 1 AND 1000),
    ADD COLUMN max_running_turns integer CHECK (max_running_turns >= 0),
    ADD COLUMN max_running_turns_per_human integer CHECK (max_running_turns_per_human >= 0);

-- A worker's slots (worker.concurrency), renewed with its beat: the pool's
-- capacity is the slots of the workers that beat.
ALTER TABLE planner_workers ADD COLUMN slots integer NOT NULL DEFAULT 0 CHECK (slots >= 0);

-- Queued turns per organization, sharded by session as the project counts
-- are, for the organization's cap and its share of the global one.
CREATE TABLE planner_queue_org_counts (
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    shard            smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    queued           bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (organization_id, shard)
);
INSERT INTO planner_queue_org_counts (organization_id, shard, queued)
SELECT p.organization_id, planner_queue_shard(t.session_id), count(*)
FROM planner_turns t JOIN projects p ON p.id = t.project_id
WHERE t.status = 'queued'
GROUP BY 1, 2;

-- planner_queue_count (00102) also moves the organization's counter. Locks
-- are taken in order: the project's shard, the organization's, the total's.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta bigint := 0;
    project uuid;
    session uuid;
    org uuid;
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
    WITH c AS (
        UPDATE planner_queue_counts SET queued = queued + delta
        WHERE project_id = project AND shard = sh RETURNING 1
    )
    UPDATE planner_queue_total SET queued = queued + delta
    WHERE shard = sh AND EXISTS (SELECT 1 FROM c);
    IF NOT FOUND THEN
        IF delta > 0 THEN
            INSERT INTO planner_queue_counts AS c (project_id, shard, queued)
            VALUES (project, sh, delta)
            ON CONFLICT (project_id, shard) DO UPDATE SET queued = c.queued + EXCLUDED.queued;
        END IF;
        UPDATE planner_queue_total SET queued = queued + delta WHERE shard = sh;
    END IF;
    SELECT organization_id INTO org FROM projects WHERE id = project;
    IF org IS NOT NULL THEN
        UPDATE planner_queue_org_counts SET queued = queued + delta
        WHERE organization_id = org AND shard = sh;
        IF NOT FOUND AND delta > 0 THEN
            INSERT INTO planner_queue_org_counts AS c (organization_id, shard, queued)
            VALUES (org, sh, delta)
            ON CONFLICT (organization_id, shard) DO UPDATE SET queued = c.queued + EXCLUDED.queued;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The dispatcher hears of every turn that becomes ready ("r") and of every
-- ready or dispatched turn that ends or goes ("e") on ballet_dispatch, at
-- commit. It reloads the whole backlog when it takes over and whenever its
-- LISTEN connection comes back, so a lost notification only waits for that.
-- +goose StatementBegin
CREATE FUNCTION planner_dispatch_notify() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER planner_turns_dispatch_ready AFTER INSERT ON planner_turns
    FOR EACH ROW WHEN (NEW.ready_at IS NOT NULL AND NEW.finished_at IS NULL)
    EXECUTE FUNCTION planner_dispatch_notify();
CREATE TRIGGER planner_turns_dispatch_update AFTER UPDATE OF ready_at, finished_at ON planner_turns
    FOR EACH ROW WHEN ((OLD.ready_at IS NULL AND NEW.ready_at IS NOT NULL AND NEW.finished_at IS NULL)
        OR (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.ready_at IS NOT NULL))
    EXECUTE FUNCTION planner_dispatch_notify();
CREATE TRIGGER planner_turns_dispatch_delete AFTER DELETE ON planner_turns
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND OLD.ready_at IS NOT NULL)
    EXECUTE FUNCTION planner_dispatch_notify();

-- +goose Down
DROP TRIGGER planner_turns_dispatch_delete ON planner_turns;
DROP TRIGGER planner_turns_dispatch_update ON planner_turns;
DROP TRIGGER planner_turns_dispatch_ready ON planner_turns;
DROP FUNCTION planner_dispatch_notify();
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
    WITH c AS (
        UPDATE planner_queue_counts SET queued = queued + delta
        WHERE project_id = project AND shard = sh RETURNING 1
    )
    UPDATE planner_queue_total SET queued = queued + delta
    WHERE shard = sh AND EXISTS (SELECT 1 FROM c);
    IF NOT FOUND THEN
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
DROP TABLE planner_queue_org_counts;
ALTER TABLE planner_workers DROP COLUMN slots;
ALTER TABLE projects DROP COLUMN max_running_turns_per_human, DROP COLUMN max_running_turns, DROP COLUMN scheduling_weight;
ALTER TABLE organizations DROP COLUMN max_queued_turns, DROP COLUMN max_running_turns_per_human,
    DROP COLUMN max_running_turns, DROP COLUMN scheduling_weight;
DROP INDEX planner_turns_ready_idx;
ALTER TABLE planner_turns DROP COLUMN request_id, DROP COLUMN priority, DROP COLUMN ready_at;
