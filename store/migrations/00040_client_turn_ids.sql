-- +goose Up
-- A client's turn id is unique within its session, not across sessions: a
-- send names the turn by (session, client turn id); the turn's own id stays
-- the global key (and the queue's task id), equal to the client's id unless
-- another session already holds that id.
ALTER TABLE planner_turns ADD COLUMN client_turn_id uuid;
UPDATE planner_turns SET client_turn_id = id;
CREATE UNIQUE INDEX planner_turns_client_turn_idx ON planner_turns (session_id, client_turn_id);

-- +goose Down
DROP INDEX planner_turns_client_turn_idx;
ALTER TABLE planner_turns DROP COLUMN client_turn_id;
