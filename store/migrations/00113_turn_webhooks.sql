-- +goose Up
-- A send may name a webhook: the URL is POSTed once the turn ends. The
-- delivery is an outbox row written in the transaction that ends the turn
-- (a deferred trigger, so every path that ends a turn writes it, and at
-- commit, so it sees the turn's last message), and delivered by the
-- webhook senders, which claim due rows with FOR UPDATE SKIP LOCKED.
ALTER TABLE planner_turns ADD COLUMN webhook_url text;

CREATE TABLE webhook_deliveries (
    id              text PRIMARY KEY,
    turn_id         uuid NOT NULL REFERENCES planner_turns(id) ON DELETE CASCADE,
    url             text NOT NULL,
    payload         jsonb NOT NULL,
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_error      text,
    UNIQUE (turn_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;

-- +goose StatementBegin
CREATE FUNCTION webhook_turn_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (id, turn_id, url, payload)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), t.id, t.webhook_url,
        jsonb_build_object('type', 'turn.done', 'turn', t.id, 'session', t.session_id, 'project', p.key,
            'status', t.status, 'reason', t.done_reason,
            'message', (SELECT NULLIF(string_agg(b->>'text', '' ORDER BY i), '')
                FROM (SELECT m.content FROM planner_messages m
                    WHERE m.turn_id = t.id AND m.role = 'assistant' ORDER BY m.seq DESC LIMIT 1) last,
                    jsonb_array_elements(last.content) WITH ORDINALITY AS x(b, i)
                WHERE b->>'type' = 'text'),
            'done_at', to_jsonb(t.finished_at))
    FROM planner_turns t JOIN projects p ON p.id = t.project_id
    WHERE t.id = NEW.id AND t.finished_at IS NOT NULL AND t.webhook_url IS NOT NULL
    ON CONFLICT (turn_id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER planner_turns_webhook AFTER UPDATE ON planner_turns
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.webhook_url IS NOT NULL AND OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION webhook_turn_done();

-- +goose Down
DROP TRIGGER planner_turns_webhook ON planner_turns;
DROP FUNCTION webhook_turn_done();
DROP TABLE webhook_deliveries;
ALTER TABLE planner_turns DROP COLUMN webhook_url;
