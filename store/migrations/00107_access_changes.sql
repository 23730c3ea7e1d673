-- +goose Up
-- Every api replica hears at once when a subject's access shrinks: a role
-- binding removed or changed, an API token revoked, expired early or
-- deleted (subjects, organizations and projects that go take their
-- bindings with them). Its open watches and streams check again then,
-- rather than at their next periodic check.
-- +goose StatementBegin
CREATE FUNCTION access_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ballet_access', OLD.subject);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER role_bindings_access_changed AFTER UPDATE OR DELETE ON role_bindings
    FOR EACH ROW EXECUTE FUNCTION access_changed();
CREATE TRIGGER api_tokens_access_changed AFTER DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION access_changed();
CREATE TRIGGER api_tokens_access_revoked AFTER UPDATE OF revoked_at, expires_at ON api_tokens
    FOR EACH ROW WHEN (NEW.revoked_at IS DISTINCT FROM OLD.revoked_at OR NEW.expires_at IS DISTINCT FROM OLD.expires_at)
    EXECUTE FUNCTION access_changed();

-- +goose Down
DROP TRIGGER api_tokens_access_revoked ON api_tokens;
DROP TRIGGER api_tokens_access_changed ON api_tokens;
DROP TRIGGER role_bindings_access_changed ON role_bindings;
DROP FUNCTION access_changed();
