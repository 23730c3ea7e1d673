-- +goose Up
-- An event's number row is inserted only by the events_number trigger, at
-- commit, with the organization and project of the event it numbers: that
-- event's own foreign keys checked them in the same transaction and hold
-- their key-share locks until it commits, so the number row's two checks of
-- the same parents (8 of a turn's 44 constraint checks, and two for every
-- event of every writer) proved nothing. The triggers below keep what the
-- keys did: an organization's or a project's numbers go with it.
ALTER TABLE event_numbers DROP CONSTRAINT event_numbers_organization_id_fkey,
    DROP CONSTRAINT event_numbers_project_id_fkey;

-- +goose StatementBegin
CREATE FUNCTION event_numbers_delete_organization() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM event_numbers WHERE organization_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION event_numbers_delete_project() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM event_numbers WHERE project_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER organizations_delete_event_numbers AFTER DELETE ON organizations
    FOR EACH ROW EXECUTE FUNCTION event_numbers_delete_organization();
CREATE TRIGGER projects_delete_event_numbers AFTER DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION event_numbers_delete_project();

-- +goose Down
DROP TRIGGER projects_delete_event_numbers ON projects;
DROP TRIGGER organizations_delete_event_numbers ON organizations;
DROP FUNCTION event_numbers_delete_project();
DROP FUNCTION event_numbers_delete_organization();
ALTER TABLE event_numbers
    ADD CONSTRAINT event_numbers_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE,
    ADD CONSTRAINT event_numbers_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
