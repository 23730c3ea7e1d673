-- +goose Up
-- The semantic search leg (store/embed*.go).
--
-- search_embeddings was never filled (no Embedder was wired), so it is made
-- anew: each vector records its model (a query compares only vectors of its
-- model; a model change re-embeds), and is stored as bytea, the float32
-- components of the L2-normalised vector, little-endian. That needs no
-- extension and is what the Go scan compares fastest. Every vector belongs
-- to an organization; project_id is set for items and project skills.
DROP TABLE search_embeddings;
CREATE TABLE search_embeddings (
    entity_type      text NOT NULL CHECK (entity_type IN ('item', 'skill', 'knowledge')),
    entity_id        uuid NOT NULL,
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    model            text NOT NULL,
    content_hash     bytea NOT NULL,
    embedding        bytea NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity_type, entity_id)
);
CREATE INDEX search_embeddings_organization_idx ON search_embeddings (organization_id, entity_type, model);
CREATE INDEX search_embeddings_project_idx ON search_embeddings (project_id, entity_type, model) WHERE project_id IS NOT NULL;
CREATE INDEX search_embeddings_org_level_idx ON search_embeddings (organization_id, entity_type, model) WHERE project_id IS NULL;
-- A vector stays in its row (compressed only if that pays), not in TOAST:
-- 1,536 float32 are 6 KB, over the 2 KB at which a value would move out of
-- line and cost a second lookup per row scanned.
ALTER TABLE search_embeddings ALTER COLUMN embedding SET STORAGE MAIN;

-- Dirty marks: a scope (a project, or an organization with project_id NULL)
-- whose searchable text changed since it was last embedded. A mark is a
-- row inserted ON CONFLICT DO NOTHING: an existing mark is left alone and
-- not locked, so edits of one project never wait on each other here.
CREATE TABLE embed_dirty (
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    marked_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (organization_id, project_id)
);
CREATE INDEX embed_dirty_marked_idx ON embed_dirty (marked_at);

-- embed_mark marks a scope dirty and notifies ballet_embed_dirty with
-- "<organization id>:<project id>" (project empty for an organization
-- scope). A notification is delivered when its transaction commits, and
-- identical ones of one transaction are delivered once.
-- +goose StatementBegin
CREATE FUNCTION embed_mark(org uuid, project uuid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF org IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO embed_dirty (organization_id, project_id) VALUES (org, project)
    ON CONFLICT (organization_id, project_id) DO NOTHING;
    PERFORM pg_notify('ballet_embed_dirty', org::text || ':' || COALESCE(project::text, ''));
END;
$$;
-- +goose StatementEnd

-- The triggers are deferred constraint triggers: the mark is made at
-- commit, when the change becomes readable, so a concurrent first mark of
-- the same scope waits at most for the other's commit, never for the rest
-- of its transaction. A scope deleted in the same transaction (its project
-- or organization gone) is not marked: its vectors go with it.

-- An item marks its project.
-- +goose StatementBegin
CREATE FUNCTION embed_mark_item() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM embed_mark(p.organization_id, p.id) FROM projects p WHERE p.id = OLD.project_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND (TG_OP = 'INSERT' OR NEW.project_id IS DISTINCT FROM OLD.project_id) THEN
        PERFORM embed_mark(p.organization_id, p.id) FROM projects p WHERE p.id = NEW.project_id;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER items_embed_insert AFTER INSERT ON items
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION embed_mark_item();
CREATE CONSTRAINT TRIGGER items_embed_update AFTER UPDATE OF key, title, description, project_id ON items
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.key IS DISTINCT FROM NEW.key OR OLD.title IS DISTINCT FROM NEW.title
       OR OLD.description IS DISTINCT FROM NEW.description OR OLD.project_id IS DISTINCT FROM NEW.project_id)
    EXECUTE FUNCTION embed_mark_item();
CREATE CONSTRAINT TRIGGER items_embed_delete AFTER DELETE ON items
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION embed_mark_item();

-- A skill marks its project (a project skill) or its organization (an
-- organization skill); a platform skill marks nothing (it is not
-- embedded). The text embedded is the one the full-text leg searches:
-- name, description and draft. Publishing a version copies the draft and
-- changes none of them, so it marks nothing.
-- +goose StatementBegin
CREATE FUNCTION embed_mark_skill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.scope_kind <> 'platform' THEN
        PERFORM embed_mark(o.id, p.id) FROM organizations o LEFT JOIN projects p ON p.id = OLD.project_id
        WHERE o.id = OLD.organization_id AND (OLD.project_id IS NULL OR p.id IS NOT NULL);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.scope_kind <> 'platform' THEN
        PERFORM embed_mark(o.id, p.id) FROM organizations o LEFT JOIN projects p ON p.id = NEW.project_id
        WHERE o.id = NEW.organization_id AND (NEW.project_id IS NULL OR p.id IS NOT NULL);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER skills_embed_insert AFTER INSERT ON skills
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION embed_mark_skill();
CREATE CONSTRAINT TRIGGER skills_embed_update
    AFTER UPDATE OF name, description, draft, scope_kind, organization_id, project_id ON skills
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.description IS DISTINCT FROM NEW.description
       OR OLD.draft IS DISTINCT FROM NEW.draft OR OLD.scope_kind IS DISTINCT FROM NEW.scope_kind
       OR OLD.organization_id IS DISTINCT FROM NEW.organization_id OR OLD.project_id IS DISTINCT FROM NEW.project_id)
    EXECUTE FUNCTION embed_mark_skill();
CREATE CONSTRAINT TRIGGER skills_embed_delete AFTER DELETE ON skills
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION embed_mark_skill();

-- A knowledge entry marks its organization.
-- +goose StatementBegin
CREATE FUNCTION embed_mark_knowledge() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM embed_mark(o.id, NULL) FROM organizations o WHERE o.id = OLD.organization_id;
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.organization_id IS DISTINCT FROM OLD.organization_id) THEN
        PERFORM embed_mark(o.id, NULL) FROM organizations o WHERE o.id = NEW.organization_id;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER knowledge_embed_insert AFTER INSERT ON knowledge_entries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION embed_mark_knowledge();
CREATE CONSTRAINT TRIGGER knowledge_embed_update AFTER UPDATE OF title, body, organization_id ON knowledge_entries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.body IS DISTINCT FROM NEW.body
       OR OLD.organization_id IS DISTINCT FROM NEW.organization_id)
    EXECUTE FUNCTION embed_mark_knowledge();
CREATE CONSTRAINT TRIGGER knowledge_embed_delete AFTER DELETE ON knowledge_entries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION embed_mark_knowledge();

-- +goose Down
DROP TRIGGER knowledge_embed_delete ON knowledge_entries;
DROP TRIGGER knowledge_embed_update ON knowledge_entries;
DROP TRIGGER knowledge_embed_insert ON knowledge_entries;
DROP TRIGGER skills_embed_delete ON skills;
DROP TRIGGER skills_embed_update ON skills;
DROP TRIGGER skills_embed_insert ON skills;
DROP TRIGGER items_embed_delete ON items;
DROP TRIGGER items_embed_update ON items;
DROP TRIGGER items_embed_insert ON items;
DROP FUNCTION embed_mark_knowledge();
DROP FUNCTION embed_mark_skill();
DROP FUNCTION embed_mark_item();
DROP FUNCTION embed_mark(uuid, uuid);
DROP TABLE embed_dirty;
DROP TABLE search_embeddings;
CREATE TABLE search_embeddings (
    entity_type      text NOT NULL CHECK (entity_type IN ('item', 'skill', 'knowledge')),
    entity_id        uuid NOT NULL,
    organization_id  uuid REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    content_hash     bytea NOT NULL,
    embedding        real[] NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity_type, entity_id)
);
CREATE INDEX search_embeddings_scope_idx ON search_embeddings (entity_type, organization_id, updated_at DESC);
