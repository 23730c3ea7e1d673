-- +goose Up
-- A session's messages are inserted only under its row lock, as its outputs
-- are (00098): by a send, with the turn it inserts, or by a fenced write of
-- the running turn, with the fence's turn. The foreign-key checks of
-- session_id and turn_id (8 of a turn's 44 constraint checks) proved
-- nothing. The triggers below keep what the keys did on delete: a
-- session's messages go with it; a deleted turn's messages stay, without
-- their turn.
ALTER TABLE planner_messages DROP CONSTRAINT planner_messages_session_id_fkey,
    DROP CONSTRAINT planner_messages_turn_id_fkey;

-- +goose StatementBegin
CREATE FUNCTION planner_messages_delete_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM planner_messages WHERE session_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION planner_messages_delete_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE planner_messages SET turn_id = NULL WHERE turn_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER planner_sessions_delete_messages AFTER DELETE ON planner_sessions
    FOR EACH ROW EXECUTE FUNCTION planner_messages_delete_session();
CREATE TRIGGER planner_turns_delete_messages AFTER DELETE ON planner_turns
    FOR EACH ROW EXECUTE FUNCTION planner_messages_delete_turn();

-- +goose Down
DROP TRIGGER planner_turns_delete_messages ON planner_turns;
DROP TRIGGER planner_sessions_delete_messages ON planner_sessions;
DROP FUNCTION planner_messages_delete_turn();
DROP FUNCTION planner_messages_delete_session();
ALTER TABLE planner_messages
    ADD CONSTRAINT planner_messages_session_id_fkey FOREIGN KEY (session_id) REFERENCES planner_sessions(id) ON DELETE CASCADE,
    ADD CONSTRAINT planner_messages_turn_id_fkey FOREIGN KEY (turn_id) REFERENCES planner_turns(id) ON DELETE SET NULL;
