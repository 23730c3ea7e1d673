-- +goose Up
-- Queue limits read counters instead of counting queued turns: a send costs
-- the same with ten thousand turns queued as with none. The counters are
-- kept by triggers on planner_turns, so every way a turn enters or leaves
-- the queued state (send, claim, cancel, a failed claim, a deleted session
-- or project) moves them in the transaction that moves the turn, whatever
-- the statement.
--
-- Each counter is split into 16 shards, by the turn's session: a session's
-- transactions already take turns on its row, and sessions on different
-- shards never wait for one another's counter. A limit sums the 16 rows.
CREATE TABLE planner_queue_counts (
    project_id  uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    shard       smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    queued      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, shard)
);

CREATE TABLE planner_queue_total (
    shard   smallint PRIMARY KEY CHECK (shard BETWEEN 0 AND 15),
    queued  bigint NOT NULL DEFAULT 0
);
INSERT INTO planner_queue_total (shard) SELECT s FROM generate_series(0, 15) s;

-- planner_queue_shard is the counter shard of a session's turns.
CREATE FUNCTION planner_queue_shard(session uuid) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT (hashtext(session::text) & 15)::smallint $$;

-- planner_queue_count moves the counters of a turn that entered (NEW) or
-- left (OLD) the queued state. It runs deferred, at commit, so that a
-- transaction holds a counter row only while it commits. A decrement only
-- updates: the row exists since the turn's increment, unless its project's
-- deletion removed it already. A turn's project and session never change.
-- +goose StatementBegin
CREATE FUNCTION planner_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE CONSTRAINT TRIGGER planner_turns_queue_insert AFTER INSERT ON planner_turns
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION planner_queue_count();
CREATE CONSTRAINT TRIGGER planner_turns_queue_update AFTER UPDATE OF status ON planner_turns
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.status = 'queued') <> (NEW.status = 'queued'))
    EXECUTE FUNCTION planner_queue_count();
CREATE CONSTRAINT TRIGGER planner_turns_queue_delete AFTER DELETE ON planner_turns
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.status = 'queued')
    EXECUTE FUNCTION planner_queue_count();

-- The turns queued now are counted; the triggers above hold planner_turns
-- against writes until this migration commits.
INSERT INTO planner_queue_counts (project_id, shard, queued)
SELECT project_id, planner_queue_shard(session_id), count(*)
FROM planner_turns WHERE status = 'queued'
GROUP BY 1, 2;
UPDATE planner_queue_total t SET queued = c.n
FROM (SELECT planner_queue_shard(session_id) AS shard, count(*) AS n
      FROM planner_turns WHERE status = 'queued' GROUP BY 1) c
WHERE t.shard = c.shard;

-- Nothing counts queued turns by project or in all any more.
DROP INDEX planner_turns_queued_project_idx;
DROP INDEX planner_turns_queued_idx;

-- +goose Down
CREATE INDEX planner_turns_queued_project_idx ON planner_turns (project_id) WHERE status = 'queued';
CREATE INDEX planner_turns_queued_idx ON planner_turns (created_at) WHERE status = 'queued';
DROP TRIGGER planner_turns_queue_delete ON planner_turns;
DROP TRIGGER planner_turns_queue_update ON planner_turns;
DROP TRIGGER planner_turns_queue_insert ON planner_turns;
DROP FUNCTION planner_queue_count();
DROP FUNCTION planner_queue_shard(uuid);
DROP TABLE planner_queue_total, planner_queue_counts;
