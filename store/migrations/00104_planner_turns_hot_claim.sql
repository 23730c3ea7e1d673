-- +goose Up
-- A claim changes a turn's status, attempts and started_at and nothing a
-- reader finds it by, but it was never a HOT update: status is in the
-- predicates of the open, running and due-heads indexes, so the claim
-- inserted the new row version into all five indexes of the table. A turn
-- is open (queued or running) exactly while finished_at is NULL (the
-- table's CHECK ties the finished statuses to finished_at), so the open and
-- due-heads indexes now say that, and so do their readers: an open turn is
-- found by finished_at IS NULL, a queued or a running one by that and its
-- status. The running index goes: its readers (a
-- session's running turn, the sweeper's and ForgetWorkers' running turns)
-- read the open index, whose entries per session are few. A finish still
-- moves finished_at, and stays a full update.
DROP INDEX planner_turns_running_idx;
DROP INDEX planner_turns_open_idx;
CREATE INDEX planner_turns_open_idx ON planner_turns (session_id, position) WHERE finished_at IS NULL;
DROP INDEX planner_turns_due_heads_idx;
CREATE INDEX planner_turns_due_heads_idx ON planner_turns (enqueued_at)
    WHERE finished_at IS NULL AND enqueued_at IS NOT NULL;
ALTER TABLE planner_turns SET (fillfactor = 80);

-- +goose Down
ALTER TABLE planner_turns RESET (fillfactor);
DROP INDEX planner_turns_due_heads_idx;
CREATE INDEX planner_turns_due_heads_idx ON planner_turns (enqueued_at)
    WHERE status = 'queued' AND enqueued_at IS NOT NULL;
DROP INDEX planner_turns_open_idx;
CREATE INDEX planner_turns_open_idx ON planner_turns (session_id, position) WHERE status IN ('queued', 'running');
CREATE INDEX planner_turns_running_idx ON planner_turns (session_id) WHERE status = 'running';
