-- +goose Up
-- An organization's event numbers are assigned after commit, in batches,
-- instead of at each commit. The deferred trigger of migration 00041 held
-- the organization's counter row from the number's assignment through the
-- commit's WAL flush, so no two commits that wrote an event of one
-- organization could flush together: every planner send and finish of an
-- organization queued behind the one before it (docs/decisions.md).
--
-- Now an event's insert also queues it in event_numbering (a plain AFTER
-- INSERT trigger, in the same transaction: an event commits with its place
-- in the queue, whatever statement wrote it). The numberer
-- (store.DB.NumberEvents) takes the queue under one advisory lock, numbers
-- what it took per organization in the log's order, moves the counters
-- once per organization and NOTIFYs each organization's highest number;
-- its lock is held to its commit, so numbers become visible in increasing
-- order and a replay "after N" still never misses a later one.
CREATE TABLE event_numbering (
    seq              bigint PRIMARY KEY,
    organization_id  uuid NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION events_queue_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_numbering (seq, organization_id) VALUES (NEW.seq, NEW.organization_id);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER events_number ON events;
CREATE TRIGGER events_queue_number AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_queue_number();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION event_numbers_delete_organization() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM event_numbers WHERE organization_id = OLD.id;
    DELETE FROM event_numbering WHERE organization_id = OLD.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- Events still queued are numbered as the old trigger would have.
WITH q AS (
    DELETE FROM event_numbering RETURNING seq, organization_id
), ordered AS (
    SELECT e.seq, e.organization_id, e.project_id,
           row_number() OVER (PARTITION BY e.organization_id ORDER BY e.seq) AS rn,
           count(*) OVER (PARTITION BY e.organization_id) AS n
    FROM q JOIN events e ON e.seq = q.seq
), counters AS (
    INSERT INTO organization_event_counters AS c (organization_id, last_seq)
    SELECT organization_id, count(*) FROM ordered GROUP BY organization_id
    ON CONFLICT (organization_id) DO UPDATE SET last_seq = c.last_seq + EXCLUDED.last_seq
    RETURNING organization_id, last_seq
)
INSERT INTO event_numbers (seq, organization_id, org_seq, project_id)
SELECT o.seq, o.organization_id, c.last_seq - o.n + o.rn, o.project_id
FROM ordered o JOIN counters c USING (organization_id);
DROP TRIGGER events_queue_number ON events;
DROP FUNCTION events_queue_number();
DROP TABLE event_numbering;
CREATE CONSTRAINT TRIGGER events_number AFTER INSERT ON events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION events_number();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION event_numbers_delete_organization() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM event_numbers WHERE organization_id = OLD.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
