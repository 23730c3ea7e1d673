-- +goose Up
-- A turn's outputs are inserted only by transactions that hold their
-- session's row lock (a send's, a claim's or a fenced write's UPDATE of the
-- session, or a cancel's lock), with that session's id and the id of a turn
-- of that session: the fence's, or the one the transaction itself inserted.
-- The session and the turn exist and cannot be deleted before the insert
-- commits, so the two foreign-key checks per output (an index probe and a
-- key-share lock on each parent) proved nothing; they were 16 of a turn's 44
-- constraint checks. What the keys also did, deleting a session's or a
-- turn's outputs with it, the triggers below do.
ALTER TABLE planner_outputs DROP CONSTRAINT planner_outputs_session_id_fkey,
    DROP CONSTRAINT planner_outputs_turn_id_fkey;

-- +goose StatementBegin
CREATE FUNCTION planner_outputs_delete_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM planner_outputs WHERE session_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION planner_outputs_delete_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM planner_outputs WHERE turn_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER planner_sessions_delete_outputs AFTER DELETE ON planner_sessions
    FOR EACH ROW EXECUTE FUNCTION planner_outputs_delete_session();
CREATE TRIGGER planner_turns_delete_outputs AFTER DELETE ON planner_turns
    FOR EACH ROW EXECUTE FUNCTION planner_outputs_delete_turn();

-- +goose Down
DROP TRIGGER planner_turns_delete_outputs ON planner_turns;
DROP TRIGGER planner_sessions_delete_outputs ON planner_sessions;
DROP FUNCTION planner_outputs_delete_turn();
DROP FUNCTION planner_outputs_delete_session();
ALTER TABLE planner_outputs
    ADD CONSTRAINT planner_outputs_session_id_fkey FOREIGN KEY (session_id) REFERENCES planner_sessions(id) ON DELETE CASCADE,
    ADD CONSTRAINT planner_outputs_turn_id_fkey FOREIGN KEY (turn_id) REFERENCES planner_turns(id) ON DELETE CASCADE;
