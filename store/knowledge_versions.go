package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// knowledgeVersionColumns are what scanKnowledgeVersion reads from
// knowledge_versions; knowledgeVersionHeadColumns are the same with the body
// left out, for lists.
const (
	knowledgeVersionColumns     = `entry_id, version, kind, title, body, projects, items, updated_by, created_at`
	knowledgeVersionHeadColumns = `entry_id, version, kind, title, '', projects, items, updated_by, created_at`
)

func scanKnowledgeVersion(row pgx.Row) (KnowledgeVersion, error) {
	var v KnowledgeVersion
	err := row.Scan(&v.EntryID, &v.Version, &v.Kind, &v.Title, &v.Body, &v.Projects, &v.Items, &v.UpdatedBy, &v.CreatedAt)
	return v, err
}

func insertKnowledgeVersion(ctx context.Context, tx pgx.Tx, k KnowledgeEntry) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO knowledge_versions (entry_id, version, kind, title, body, projects, items, updated_by, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		k.ID, k.Version, k.Kind, k.Title, k.Body, k.Projects, k.Items, k.UpdatedBy, k.UpdatedAt)
	return err
}

// ListKnowledgeVersions lists every kept version of an entry, newest first,
// without bodies (knowledge.read).
func (db *DB) ListKnowledgeVersions(ctx context.Context, caller Caller, orgKey, id string) ([]KnowledgeVersion, error) {
	k, err := db.GetKnowledge(ctx, caller, orgKey, id)
	if err != nil {
		return nil, fmt.Errorf("store: list knowledge versions: %w", err)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+knowledgeVersionHeadColumns+`
		FROM knowledge_versions WHERE entry_id = $1 ORDER BY version DESC`, k.ID)
	if err != nil {
		return nil, fmt.Errorf("store: list knowledge versions: %w", err)
	}
	vs, err := collect(rows, scanKnowledgeVersion)
	if err != nil {
		return nil, fmt.Errorf("store: list knowledge versions: %w", err)
	}
	return vs, nil
}

// GetKnowledgeVersion returns version n of an entry with its body
// (knowledge.read).
func (db *DB) GetKnowledgeVersion(ctx context.Context, caller Caller, orgKey, id string, n int) (KnowledgeVersion, error) {
	k, err := db.GetKnowledge(ctx, caller, orgKey, id)
	if err != nil {
		return KnowledgeVersion{}, fmt.Errorf("store: get knowledge version: %w", err)
	}
	if n < 1 || n > k.Version {
		return KnowledgeVersion{}, fmt.Errorf("store: get knowledge version: %w",
			Errorf(CodeNotFound, "knowledge entry %s has no version %d (current is %d)", k.ID, n, k.Version))
	}
	rows, err := db.pool.Query(ctx, `SELECT `+knowledgeVersionColumns+`
		FROM knowledge_versions WHERE entry_id = $1 AND version = $2`, k.ID, n)
	if err != nil {
		return KnowledgeVersion{}, fmt.Errorf("store: get knowledge version: %w", err)
	}
	v, err := collectOne(rows, scanKnowledgeVersion)
	if err != nil {
		return KnowledgeVersion{}, fmt.Errorf("store: get knowledge version: %w", notFound(err, "knowledge version %d", n))
	}
	return v, nil
}
