-- +goose Up
-- planner_outputs_turn_idx was the index of the foreign key 00098 dropped.
-- No read looks a turn's outputs up by turn alone: every read names the
-- session, and a session's outputs are one range of the primary key
-- (session_id, cursor). It cost a b-tree insert per output, four a
-- one-round turn. The trigger that deletes a deleted turn's outputs reads
-- that range, by the turn's session. (planner_messages_turn_idx stays: the
-- history reads the messages of the turns from the summary's on through it.)
DROP INDEX planner_outputs_turn_idx;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_outputs_delete_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM planner_outputs WHERE session_id = OLD.session_id AND turn_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION planner_outputs_delete_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM planner_outputs WHERE turn_id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE INDEX planner_outputs_turn_idx ON planner_outputs (turn_id);
