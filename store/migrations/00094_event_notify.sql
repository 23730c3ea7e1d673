-- +goose Up
-- Event streams follow the log through a nudge: when an event's organization
-- number is assigned (at commit, by the deferred trigger of 00041), the same
-- function NOTIFYs ballet_events with "<organization id>:<org_seq>". A
-- notification sent inside a transaction is delivered only when it commits,
-- in commit order, so a listener never hears of an event it cannot read yet;
-- the log stays the truth and a lost notification is caught up from it.
--
-- A project stream reads its events by organization number: the number row
-- carries the event's project, so that query walks one index range instead
-- of the organization's whole log after the number.
ALTER TABLE event_numbers ADD COLUMN project_id uuid REFERENCES projects(id) ON DELETE CASCADE;
UPDATE event_numbers n SET project_id = e.project_id FROM events e WHERE e.seq = n.seq AND e.project_id IS NOT NULL;
CREATE INDEX event_numbers_project_idx ON event_numbers (project_id, org_seq) WHERE project_id IS NOT NULL;

-- An item stream also shows the dependencies naming the item, found by the
-- item keys their payload holds.
CREATE INDEX events_dependency_from_idx ON events ((payload->>'from'), seq) WHERE entity_type = 'dependency';
CREATE INDEX events_dependency_to_idx ON events ((payload->>'to'), seq) WHERE entity_type = 'dependency';

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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_number() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    INSERT INTO organization_event_counters AS c (organization_id, last_seq)
    VALUES (NEW.organization_id, 1)
    ON CONFLICT (organization_id) DO UPDATE SET last_seq = c.last_seq + 1
    RETURNING last_seq INTO n;
    INSERT INTO event_numbers (seq, organization_id, org_seq) VALUES (NEW.seq, NEW.organization_id, n);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP INDEX events_dependency_to_idx;
DROP INDEX events_dependency_from_idx;
DROP INDEX event_numbers_project_idx;
ALTER TABLE event_numbers DROP COLUMN project_id;
