-- +goose Up
-- What a client sees of the event log is numbered per organization, 1, 2, 3
-- without gaps, so that no tenant can count another's writes; the global
-- events.seq keeps the order inside the service. The number is assigned at
-- commit by a deferred trigger: the organization's counter row is the last
-- lock its transaction takes (no deadlock with the writes before it) and is
-- held through commit, so numbers follow commit order within an
-- organization and a replay "after N" never misses a later commit.
CREATE TABLE organization_event_counters (
    organization_id  uuid PRIMARY KEY REFERENCES organizations(id) ON DELETE CASCADE,
    last_seq         bigint NOT NULL CHECK (last_seq >= 1)
);

CREATE TABLE event_numbers (
    seq              bigint PRIMARY KEY,
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    org_seq          bigint NOT NULL CHECK (org_seq >= 1),
    UNIQUE (organization_id, org_seq)
);

INSERT INTO event_numbers (seq, organization_id, org_seq)
SELECT seq, organization_id, row_number() OVER (PARTITION BY organization_id ORDER BY seq) FROM events;
INSERT INTO organization_event_counters (organization_id, last_seq)
SELECT organization_id, max(org_seq) FROM event_numbers GROUP BY organization_id;

-- +goose StatementBegin
CREATE FUNCTION events_number() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE CONSTRAINT TRIGGER events_number AFTER INSERT ON events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION events_number();

-- +goose Down
DROP TRIGGER events_number ON events;
DROP FUNCTION events_number();
DROP TABLE event_numbers, organization_event_counters;
