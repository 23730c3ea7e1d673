-- +goose Up
-- A client turn id is an idempotency key the client picks: any 1 to 255
-- printable ASCII characters, unique per session. UUIDs sent before keep
-- their canonical lower-case text.
ALTER TABLE planner_turns ALTER COLUMN client_turn_id TYPE text USING client_turn_id::text;

-- +goose Down
ALTER TABLE planner_turns ALTER COLUMN client_turn_id TYPE uuid USING CASE
    WHEN client_turn_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN client_turn_id::uuid END;
