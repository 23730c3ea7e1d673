-- +goose Up
-- A queued output names the human's message its turn answers (seq), so that
-- a client replaying a session shows what the human sent, in its turn, as
-- it shows a stored message: reads join the message by (session, seq).
UPDATE planner_outputs o SET data = o.data || jsonb_build_object('seq', t.message_seq)
FROM planner_turns t
WHERE o.type = 'queued' AND t.id = o.turn_id AND NOT o.data ? 'seq';

-- +goose Down
UPDATE planner_outputs SET data = data - 'seq' WHERE type = 'queued';
