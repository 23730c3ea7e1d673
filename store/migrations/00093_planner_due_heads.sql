-- +goose Up
-- The sweeper looks for sessions' next turns whose task may be missing from
-- the queue: queued turns marked enqueued a while ago. Only a session's next
-- turn is ever marked (the one that send, finish or cancel made the head, in
-- the same transaction), so this index holds one row per session with queued
-- work and the sweep reads the oldest of them, never the backlog behind.
CREATE INDEX planner_turns_due_heads_idx ON planner_turns (enqueued_at)
    WHERE status = 'queued' AND enqueued_at IS NOT NULL;

-- A next turn left unmarked by an older version is marked now, so that the
-- sweeper finds it.
UPDATE planner_turns t SET enqueued_at = t.created_at
WHERE t.status = 'queued' AND t.enqueued_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM planner_turns e WHERE e.session_id = t.session_id
                  AND e.position < t.position AND e.status IN ('queued', 'running'));

-- +goose Down
DROP INDEX planner_turns_due_heads_idx;
