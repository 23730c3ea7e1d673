package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// EmbedScope is one unit of embedding work: a project (its items and
// project skills), or an organization (ProjectID "": its knowledge entries
// and organization-level skills). Platform-level skills belong to no
// organization, so there is no one to meter their embedding to: they are
// never embedded, and only the lexical legs find them.
type EmbedScope struct {
	OrganizationID string `json:"organization"`
	ProjectID      string `json:"project,omitempty"`
}

// EmbedDirtyChannel is the Postgres notification channel of dirty marks:
// triggers (migration 00095) mark a scope dirty in embed_dirty when an
// item's key, title or description, a project or organization skill's
// name, description or draft (the text the lexical leg searches), or a
// knowledge entry's title or body is created, changed or deleted, and
// NOTIFY this channel with "<organization id>:<project id>" (the project
// empty for an organization scope). Marks and notifications happen at
// commit, so a listener never hears of a change it cannot read yet.
const EmbedDirtyChannel = "ballet_embed_dirty"

// EmbedListenerName is the application_name of the connection
// ListenEmbedDirty opens, for finding it in pg_stat_activity.
const EmbedListenerName = "ballet-embed-dispatch"

// ListenEmbedDirty opens a connection of its own, outside the pool,
// listening on EmbedDirtyChannel; the caller waits on it with
// WaitForNotification and closes it. Its application_name is
// EmbedListenerName.
func (db *DB) ListenEmbedDirty(ctx context.Context) (*pgx.Conn, error) {
	cfg := db.pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = EmbedListenerName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: listen for embed marks: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{EmbedDirtyChannel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("store: listen for embed marks: %w", err)
	}
	return conn, nil
}

// DirtyEmbedScopes lists up to limit dirty scopes, oldest mark first.
func (db *DB) DirtyEmbedScopes(ctx context.Context, limit int) ([]EmbedScope, error) {
	rows, err := db.pool.Query(ctx, `
		SELECT organization_id::text, COALESCE(project_id::text, '') FROM embed_dirty
		ORDER BY marked_at, organization_id, project_id NULLS FIRST LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: dirty embed scopes: %w", err)
	}
	scopes, err := collect(rows, scanEmbedScope)
	if err != nil {
		return nil, fmt.Errorf("store: dirty embed scopes: %w", err)
	}
	return scopes, nil
}

func scanEmbedScope(row pgx.Row) (EmbedScope, error) {
	var s EmbedScope
	err := row.Scan(&s.OrganizationID, &s.ProjectID)
	return s, err
}

// TakeEmbedScope removes the scope's mark and reports whether there was
// one. An embed task takes its scope first, then indexes it: a change
// committed meanwhile marks the scope again and so is never lost.
func (db *DB) TakeEmbedScope(ctx context.Context, s EmbedScope) (bool, error) {
	tag, err := db.pool.Exec(ctx, `
		DELETE FROM embed_dirty WHERE organization_id = $1 AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid`,
		s.OrganizationID, s.ProjectID)
	if err != nil {
		return false, fmt.Errorf("store: take embed scope: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// MarkEmbedScopes marks scopes dirty again (a task that gave up) and
// notifies EmbedDirtyChannel at commit. A scope already marked keeps its
// older mark; one of an organization or project that no longer exists is
// skipped.
func (db *DB) MarkEmbedScopes(ctx context.Context, scopes ...EmbedScope) error {
	if len(scopes) == 0 {
		return nil
	}
	orgs, projects := make([]string, len(scopes)), make([]string, len(scopes))
	for i, s := range scopes {
		orgs[i], projects[i] = s.OrganizationID, s.ProjectID
	}
	_, err := db.pool.Exec(ctx, `
		SELECT embed_mark(o.id, p.id) FROM unnest($1::uuid[], $2::text[]) AS s(org, project)
		JOIN organizations o ON o.id = s.org
		LEFT JOIN projects p ON p.id = NULLIF(s.project, '')::uuid AND p.organization_id = o.id
		WHERE s.project = '' OR p.id IS NOT NULL`, orgs, projects)
	if err != nil {
		return fmt.Errorf("store: mark embed scopes: %w", err)
	}
	return nil
}

// MarkAllEmbedScopes marks every organization and every project dirty (a
// backfill, or a change of embedding model), notifies EmbedDirtyChannel
// for each, and returns how many it marked that were not marked yet.
func (db *DB) MarkAllEmbedScopes(ctx context.Context) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `
		WITH s AS (
			SELECT id AS org, NULL::uuid AS project FROM organizations
			UNION ALL SELECT organization_id, id FROM projects)
		SELECT count(*) FILTER (WHERE NOT x.marked) FROM (
			SELECT EXISTS (SELECT 1 FROM embed_dirty d
			               WHERE d.organization_id = s.org AND d.project_id IS NOT DISTINCT FROM s.project) AS marked,
			       embed_mark(s.org, s.project) AS done
			FROM s) x`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: mark all embed scopes: %w", err)
	}
	return n, nil
}
