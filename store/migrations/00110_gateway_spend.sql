-- +goose Up
-- The gateway prices each call as it meters it: cost_micro_usd is the cost
-- in millionths of a US dollar, from gateway.prices (or the built-in
-- defaults), and NULL for a call whose model has no price, as for every
-- row written before prices existed. Reports sum the priced rows and count
-- the others as unpriced.
ALTER TABLE usage ADD COLUMN cost_micro_usd bigint CHECK (cost_micro_usd >= 0);
ALTER TABLE usage_daily
    ADD COLUMN cost_micro_usd bigint NOT NULL DEFAULT 0 CHECK (cost_micro_usd >= 0),
    ADD COLUMN unpriced bigint NOT NULL DEFAULT 0 CHECK (unpriced >= 0);
-- The days rolled up before were all unpriced.
UPDATE usage_daily SET unpriced = requests;

-- A budget counts tokens or money: token_budget holds the amount in
-- budget_unit (tokens, or micro_usd: millionths of a US dollar).
ALTER TABLE limits ADD COLUMN budget_unit text NOT NULL DEFAULT 'tokens'
    CHECK (budget_unit IN ('tokens', 'micro_usd'));

-- model_allowlists restricts the models a scope's calls may use: an
-- organization's list (project_id NULL) applies to its projects unless a
-- project has its own. No row (or an empty list) is every model.
CREATE TABLE model_allowlists (
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    project_id       uuid REFERENCES projects(id) ON DELETE CASCADE,
    models           text[] NOT NULL,
    updated_by       text NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT model_allowlists_scope UNIQUE NULLS NOT DISTINCT (organization_id, project_id)
);

-- +goose Down
DROP TABLE model_allowlists;
ALTER TABLE limits DROP COLUMN budget_unit;
ALTER TABLE usage_daily DROP COLUMN unpriced, DROP COLUMN cost_micro_usd;
ALTER TABLE usage DROP COLUMN cost_micro_usd;
