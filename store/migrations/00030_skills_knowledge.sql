-- +goose Up
-- Stored embeddings for the optional semantic search leg (store/embed.go).
-- Filled by DB.IndexEmbeddings when an Embedder is configured; empty otherwise.
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

-- +goose Down
DROP TABLE search_embeddings;
