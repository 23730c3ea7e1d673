-- +goose Up
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- Tenancy -------------------------------------------------------------------

CREATE TABLE organizations (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    key         text NOT NULL UNIQUE CHECK (key ~ '^[a-z0-9][a-z0-9-]{1,62}$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    key              text NOT NULL UNIQUE CHECK (key ~ '^[A-Z][A-Z0-9]{1,9}$'),
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    description      text NOT NULL DEFAULT '' CHECK (length(description) <= 50000),
    next_item_number bigint NOT NULL DEFAULT 1 CHECK (next_item_number >= 1),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX projects_organization_idx ON projects (organization_id);

CREATE TABLE subjects (
    id            text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 255),
    kind          text NOT NULL DEFAULT 'human' CHECK (kind IN ('human', 'service', 'system')),
    display_name  text NOT NULL DEFAULT '',
    email         text,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE role_bindings (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    subject          text NOT NULL REFERENCES subjects(id) ON DELETE CASCADE,
    role             text NOT NULL CHECK (role IN ('platform-admin', 'organization-admin', 'engineer', 'approver', 'viewer')),
    scope_kind       text NOT NULL CHECK (scope_kind IN ('platform', 'organization', 'project')),
    organization_id  uuid REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (
        (scope_kind = 'platform' AND organization_id IS NULL AND project_id IS NULL) OR
        (scope_kind = 'organization' AND organization_id IS NOT NULL AND project_id IS NULL) OR
        (scope_kind = 'project' AND organization_id IS NOT NULL AND project_id IS NOT NULL)
    ),
    CHECK (NOT (role = 'organization-admin' AND scope_kind = 'project')),
    CHECK (NOT (role = 'platform-admin' AND scope_kind <> 'platform'))
);
CREATE UNIQUE INDEX role_bindings_unique_idx ON role_bindings
    (subject, role, scope_kind, COALESCE(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
     COALESCE(project_id, '00000000-0000-0000-0000-000000000000'::uuid));
CREATE INDEX role_bindings_organization_idx ON role_bindings (organization_id);
CREATE INDEX role_bindings_project_idx ON role_bindings (project_id);

CREATE TABLE api_tokens (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    subject       text NOT NULL REFERENCES subjects(id) ON DELETE CASCADE,
    name          text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    token_hash    bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    prefix        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);
CREATE INDEX api_tokens_subject_idx ON api_tokens (subject);

-- Tracker -------------------------------------------------------------------

CREATE TABLE items (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id           uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    number               bigint NOT NULL CHECK (number >= 1),
    key                  text NOT NULL UNIQUE,
    kind                 text NOT NULL CHECK (kind IN ('milestone', 'epic', 'ticket')),
    title                text NOT NULL CHECK (length(title) BETWEEN 1 AND 300),
    description          text NOT NULL DEFAULT '' CHECK (length(description) <= 50000),
    state                text NOT NULL,
    type                 text CHECK (type IN ('feature', 'bug', 'tech_debt', 'docs', 'spike')),
    acceptance_criteria  jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(acceptance_criteria) = 'array' AND jsonb_array_length(acceptance_criteria) <= 50),
    review_mode          text CHECK (review_mode IN ('agent', 'agent+human')),
    merge_mode           text CHECK (merge_mode IN ('auto', 'manual')),
    epic_id              uuid REFERENCES items(id) ON DELETE SET NULL,
    milestone_id         uuid REFERENCES items(id) ON DELETE SET NULL,
    version              bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_by           text NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    search               tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', key), 'A') ||
        setweight(to_tsvector('english', title), 'A') ||
        setweight(to_tsvector('english', description), 'B')) STORED,
    UNIQUE (project_id, number),
    CHECK (
        (kind = 'ticket' AND state IN ('backlog', 'ready', 'in_progress', 'waiting_for_answer', 'paused', 'done', 'cancelled')
            AND type IS NOT NULL AND review_mode IS NOT NULL AND merge_mode IS NOT NULL) OR
        (kind IN ('milestone', 'epic') AND state IN ('open', 'done', 'cancelled')
            AND type IS NULL AND review_mode IS NULL AND merge_mode IS NULL AND epic_id IS NULL
            AND acceptance_criteria = '[]'::jsonb)
    ),
    CHECK (NOT (kind = 'milestone' AND milestone_id IS NOT NULL)),
    CHECK (epic_id IS NULL OR epic_id <> id),
    CHECK (milestone_id IS NULL OR milestone_id <> id)
);
CREATE INDEX items_project_kind_state_idx ON items (project_id, kind, state);
CREATE INDEX items_epic_idx ON items (epic_id);
CREATE INDEX items_milestone_idx ON items (milestone_id);
CREATE INDEX items_search_idx ON items USING gin (search);
CREATE INDEX items_title_trgm_idx ON items USING gin (title gin_trgm_ops);
CREATE INDEX items_key_trgm_idx ON items USING gin (key gin_trgm_ops);

CREATE TABLE dependencies (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id    uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    from_item_id  uuid NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    to_item_id    uuid NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    type          text NOT NULL CHECK (type IN ('blocks', 'relates')),
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (from_item_id <> to_item_id),
    UNIQUE (from_item_id, to_item_id, type)
);
CREATE INDEX dependencies_project_idx ON dependencies (project_id);
CREATE INDEX dependencies_to_idx ON dependencies (to_item_id);

CREATE TABLE changesets (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id   uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    title        text NOT NULL CHECK (length(title) BETWEEN 1 AND 300),
    summary      text NOT NULL DEFAULT '' CHECK (length(summary) <= 50000),
    status       text NOT NULL DEFAULT 'proposed' CHECK (status IN ('proposed', 'applied', 'rejected')),
    operations   jsonb NOT NULL CHECK (jsonb_typeof(operations) = 'array'
                     AND jsonb_array_length(operations) BETWEEN 1 AND 200),
    results      jsonb,
    applied_operations jsonb,
    proposed_by_kind     text NOT NULL CHECK (proposed_by_kind IN ('human', 'service', 'system')),
    proposed_by          text NOT NULL,
    proposed_acting_for  text,
    session_id   uuid,
    decided_by   text,
    decided_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'proposed') = (decided_at IS NULL)),
    CHECK ((status = 'proposed') = (decided_by IS NULL)),
    CHECK ((status = 'applied') = (results IS NOT NULL))
);
CREATE INDEX changesets_project_status_idx ON changesets (project_id, status, created_at DESC);

-- Skills --------------------------------------------------------------------

CREATE TABLE skills (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name             text NOT NULL CHECK (name ~ '^[a-z0-9-]{2,64}$'),
    scope_kind       text NOT NULL CHECK (scope_kind IN ('platform', 'organization', 'project')),
    organization_id  uuid REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    description      text NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    draft            text NOT NULL DEFAULT '' CHECK (length(draft) <= 200000),
    latest_version   integer NOT NULL DEFAULT 0 CHECK (latest_version >= 0),
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    search           tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', name), 'A') ||
        setweight(to_tsvector('english', description), 'B') ||
        setweight(to_tsvector('english', draft), 'C')) STORED,
    CHECK (
        (scope_kind = 'platform' AND organization_id IS NULL AND project_id IS NULL) OR
        (scope_kind = 'organization' AND organization_id IS NOT NULL AND project_id IS NULL) OR
        (scope_kind = 'project' AND organization_id IS NOT NULL AND project_id IS NOT NULL)
    )
);
CREATE UNIQUE INDEX skills_scope_name_idx ON skills
    (scope_kind, COALESCE(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
     COALESCE(project_id, '00000000-0000-0000-0000-000000000000'::uuid), name);
CREATE INDEX skills_organization_idx ON skills (organization_id);
CREATE INDEX skills_project_idx ON skills (project_id);
CREATE INDEX skills_search_idx ON skills USING gin (search);
CREATE INDEX skills_name_trgm_idx ON skills USING gin (name gin_trgm_ops);

CREATE TABLE skill_versions (
    skill_id    uuid NOT NULL REFERENCES skills(id) ON DELETE CASCADE,
    version     integer NOT NULL CHECK (version >= 1),
    body        text NOT NULL CHECK (length(body) <= 200000),
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (skill_id, version)
);

CREATE TABLE skill_pins (
    project_id  uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name        text NOT NULL CHECK (name ~ '^[a-z0-9-]{2,64}$'),
    version     integer CHECK (version >= 0),
    disabled    boolean NOT NULL DEFAULT false,
    updated_by  text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, name),
    CHECK (disabled = (version IS NULL))
);

-- Knowledge -----------------------------------------------------------------

CREATE TABLE knowledge_entries (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    kind             text NOT NULL CHECK (kind IN ('document', 'decision', 'note', 'debt')),
    title            text NOT NULL CHECK (length(title) BETWEEN 1 AND 300),
    body             text NOT NULL CHECK (length(body) <= 200000),
    projects         text[] NOT NULL DEFAULT '{}',
    items            text[] NOT NULL DEFAULT '{}',
    version          integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_by       text NOT NULL,
    updated_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    search           tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') ||
        setweight(to_tsvector('english', body), 'B')) STORED
);
CREATE INDEX knowledge_entries_organization_idx ON knowledge_entries (organization_id, kind, updated_at DESC);
CREATE INDEX knowledge_entries_search_idx ON knowledge_entries USING gin (search);
CREATE INDEX knowledge_entries_title_trgm_idx ON knowledge_entries USING gin (title gin_trgm_ops);
CREATE INDEX knowledge_entries_projects_idx ON knowledge_entries USING gin (projects);
CREATE INDEX knowledge_entries_items_idx ON knowledge_entries USING gin (items);

CREATE TABLE knowledge_versions (
    entry_id    uuid NOT NULL REFERENCES knowledge_entries(id) ON DELETE CASCADE,
    version     integer NOT NULL CHECK (version >= 1),
    kind        text NOT NULL CHECK (kind IN ('document', 'decision', 'note', 'debt')),
    title       text NOT NULL,
    body        text NOT NULL,
    projects    text[] NOT NULL DEFAULT '{}',
    items       text[] NOT NULL DEFAULT '{}',
    updated_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entry_id, version)
);

-- Events (append-only) ------------------------------------------------------

CREATE TABLE events (
    seq              bigserial PRIMARY KEY,
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    type             text NOT NULL CHECK (type ~ '^[a-z_]+\.[a-z_]+$'),
    entity_type      text NOT NULL,
    entity_id        text NOT NULL,
    entity_key       text,
    actor_kind       text NOT NULL CHECK (actor_kind IN ('human', 'service', 'system')),
    actor_subject    text NOT NULL,
    acting_for       text,
    payload          jsonb NOT NULL DEFAULT '{}',
    occurred_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (acting_for IS NULL OR actor_kind = 'service')
);
CREATE INDEX events_project_seq_idx ON events (project_id, seq);
CREATE INDEX events_entity_idx ON events (entity_type, entity_id, seq);
CREATE INDEX events_organization_seq_idx ON events (organization_id, seq);

-- +goose StatementBegin
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();

-- Planner -------------------------------------------------------------------

CREATE TABLE planner_sessions (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id        uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    title             text NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    created_by        text NOT NULL REFERENCES subjects(id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    last_active_at    timestamptz NOT NULL DEFAULT now(),
    next_seq          bigint NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    next_cursor       bigint NOT NULL DEFAULT 1 CHECK (next_cursor >= 1),
    next_turn         bigint NOT NULL DEFAULT 1 CHECK (next_turn >= 1),
    summary           text,
    summary_up_to     bigint,
    summary_turn      bigint,
    summary_tokens    bigint,
    lease_owner       text,
    lease_token       bigint NOT NULL DEFAULT 0,
    lease_expires_at  timestamptz,
    CHECK ((summary IS NULL) = (summary_up_to IS NULL)),
    CHECK ((summary IS NULL) = (summary_turn IS NULL))
);
CREATE INDEX planner_sessions_project_idx ON planner_sessions (project_id, last_active_at DESC);

CREATE TABLE planner_turns (
    id                uuid PRIMARY KEY,
    session_id        uuid NOT NULL REFERENCES planner_sessions(id) ON DELETE CASCADE,
    project_id        uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    position          bigint NOT NULL CHECK (position >= 1),
    message_seq       bigint NOT NULL,
    author            text NOT NULL,
    status            text NOT NULL DEFAULT 'queued'
                          CHECK (status IN ('queued', 'running', 'done', 'cancelled', 'failed')),
    cancel_requested  boolean NOT NULL DEFAULT false,
    done_reason       text,
    rounds            integer NOT NULL DEFAULT 0 CHECK (rounds >= 0),
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    enqueued_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    UNIQUE (session_id, position),
    CHECK ((status IN ('done', 'cancelled', 'failed')) = (finished_at IS NOT NULL))
);
CREATE INDEX planner_turns_open_idx ON planner_turns (session_id, position) WHERE status IN ('queued', 'running');
CREATE INDEX planner_turns_queued_project_idx ON planner_turns (project_id) WHERE status = 'queued';
CREATE INDEX planner_turns_queued_idx ON planner_turns (created_at) WHERE status = 'queued';
CREATE INDEX planner_turns_running_idx ON planner_turns (session_id) WHERE status = 'running';

CREATE TABLE planner_messages (
    session_id   uuid NOT NULL REFERENCES planner_sessions(id) ON DELETE CASCADE,
    seq          bigint NOT NULL CHECK (seq >= 1),
    role         text NOT NULL CHECK (role IN ('user', 'assistant')),
    content      jsonb NOT NULL CHECK (jsonb_typeof(content) = 'array'),
    author       text,
    stop_reason  text,
    usage        jsonb NOT NULL DEFAULT '{"input_tokens":0,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}',
    turn_id      uuid REFERENCES planner_turns(id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX planner_messages_turn_idx ON planner_messages (turn_id);

CREATE TABLE planner_tool_calls (
    session_id   uuid NOT NULL REFERENCES planner_sessions(id) ON DELETE CASCADE,
    tool_use_id  text NOT NULL,
    turn_id      uuid NOT NULL REFERENCES planner_turns(id) ON DELETE CASCADE,
    name         text NOT NULL,
    input        jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done')),
    result       text,
    is_error     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    PRIMARY KEY (session_id, tool_use_id),
    CHECK ((status = 'done') = (result IS NOT NULL))
);
CREATE INDEX planner_tool_calls_turn_idx ON planner_tool_calls (turn_id);

CREATE TABLE planner_outputs (
    session_id  uuid NOT NULL REFERENCES planner_sessions(id) ON DELETE CASCADE,
    cursor      bigint NOT NULL CHECK (cursor >= 1),
    turn_id     uuid NOT NULL REFERENCES planner_turns(id) ON DELETE CASCADE,
    type        text NOT NULL CHECK (type IN ('queued', 'started', 'tool_call', 'tool_result', 'message', 'compacted', 'error', 'done')),
    data        jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, cursor)
);
CREATE INDEX planner_outputs_turn_idx ON planner_outputs (turn_id);
CREATE UNIQUE INDEX planner_outputs_one_done_idx ON planner_outputs (turn_id) WHERE type = 'done';

-- Gateway -------------------------------------------------------------------

CREATE TABLE credentials (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    provider         text NOT NULL CHECK (provider IN ('anthropic', 'openai')),
    ciphertext       bytea NOT NULL,
    nonce            bytea NOT NULL CHECK (length(nonce) = 12),
    key_id           text NOT NULL,
    fingerprint      text NOT NULL,
    base_url         text CHECK (base_url IS NULL OR base_url ~ '^https?://'),
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX credentials_organization_idx ON credentials (organization_id, provider) WHERE project_id IS NULL;
CREATE UNIQUE INDEX credentials_project_idx ON credentials (project_id, provider) WHERE project_id IS NOT NULL;

CREATE TABLE usage (
    id                  bigserial PRIMARY KEY,
    request_id          text NOT NULL UNIQUE,
    organization_id     uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id          uuid REFERENCES projects(id) ON DELETE CASCADE,
    session_id          uuid,
    caller              text NOT NULL,
    acting_for          text,
    provider            text NOT NULL,
    model               text NOT NULL,
    status              integer NOT NULL,
    input_tokens        bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens       bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cache_read_tokens   bigint NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
    cache_write_tokens  bigint NOT NULL DEFAULT 0 CHECK (cache_write_tokens >= 0),
    estimated           boolean NOT NULL DEFAULT false,
    duration_ms         integer NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_project_time_idx ON usage (project_id, created_at);
CREATE INDEX usage_organization_time_idx ON usage (organization_id, created_at);

CREATE TABLE limits (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id    uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id         uuid REFERENCES projects(id) ON DELETE CASCADE,
    token_budget       bigint CHECK (token_budget >= 0),
    budget_period      text NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month')),
    requests_per_minute integer CHECK (requests_per_minute >= 0),
    tokens_per_minute  bigint CHECK (tokens_per_minute >= 0),
    updated_by         text NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX limits_organization_idx ON limits (organization_id) WHERE project_id IS NULL;
CREATE UNIQUE INDEX limits_project_idx ON limits (project_id) WHERE project_id IS NOT NULL;

-- +goose Down
DROP TABLE limits, usage, credentials, planner_outputs, planner_tool_calls, planner_messages,
    planner_turns, planner_sessions, events, knowledge_versions, knowledge_entries, skill_pins,
    skill_versions, skills, changesets, dependencies, items, api_tokens, role_bindings, subjects,
    projects, organizations;
DROP FUNCTION events_append_only();
