package store

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Embedder turns texts into vectors for the semantic search leg. It is
// optional: Search and SearchKnowledge take one in their query, and a nil
// Embedder (the default, used until the gateway offers embeddings) turns
// the leg off, leaving full-text and trigram fused alone.
//
// The leg is computed in Go: the query's embedding is compared by cosine
// similarity with at most maxSemanticRows stored embeddings of the caller's
// read scope (search_embeddings, filled by IndexEmbeddings), and the ranked
// ids join the SQL fusion. That is cheap for a knowledge space or a few
// thousand items; beyond it, a pgvector index should replace the scan.
type Embedder interface {
	// Embed returns one vector per text, all of the same dimension.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Entity types of search_embeddings.
const (
	embedItem      = "item"
	embedSkill     = "skill"
	embedKnowledge = "knowledge"
)

// maxSemanticRows bounds the stored embeddings one query compares against.
const maxSemanticRows = 5000

// semanticRank ranks stored embeddings of entityType by cosine similarity
// to q, best first; nil when e is nil. The read scope here only narrows the
// scan: the SQL re-filters every id by the full rule.
func (db *DB) semanticRank(ctx context.Context, e Embedder, entityType, q string, rs readScope) ([]string, error) {
	if e == nil {
		return nil, nil
	}
	vecs, err := e.Embed(ctx, []string{q})
	if err != nil {
		return nil, fmt.Errorf("semantic leg: embed query: %w", err)
	}
	if len(vecs) != 1 || len(vecs[0]) == 0 {
		return nil, fmt.Errorf("semantic leg: embedder returned %d vectors for 1 text", len(vecs))
	}
	query := vecs[0]
	rows, err := db.pool.Query(ctx, `
		SELECT entity_id::text, embedding FROM search_embeddings
		WHERE entity_type = $1 AND ($2::bool OR organization_id IS NULL
		   OR organization_id = ANY($3::uuid[]) OR project_id = ANY($4::uuid[]))
		ORDER BY updated_at DESC LIMIT $5`,
		entityType, rs.all, nonNil(rs.organizations), nonNil(rs.projects), maxSemanticRows)
	if err != nil {
		return nil, fmt.Errorf("semantic leg: %w", err)
	}
	defer rows.Close()
	type scored struct {
		id  string
		sim float64
	}
	var all []scored
	for rows.Next() {
		var id string
		var v []float32
		if err := rows.Scan(&id, &v); err != nil {
			return nil, fmt.Errorf("semantic leg: %w", err)
		}
		if sim := cosine(query, v); sim > 0 {
			all = append(all, scored{id, sim})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("semantic leg: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].sim > all[j].sim })
	if len(all) > searchCandidate {
		all = all[:searchCandidate]
	}
	ids := make([]string, len(all))
	for i, s := range all {
		ids[i] = s.id
	}
	return ids, nil
}

// cosine is the cosine similarity of a and b; 0 when their dimensions
// differ or either is zero.
func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}

// embedSources select, per entity type, the rows whose stored embedding is
// missing or stale: id, organization, project, text, content hash.
var embedSources = map[string]string{
	embedItem: `SELECT x.id, p.organization_id, x.project_id, x.text, x.hash FROM (
		SELECT id, project_id, key || E'\n' || title || E'\n' || description AS text,
		       sha256(convert_to(key || E'\n' || title || E'\n' || description, 'UTF8')) AS hash FROM items) x
		JOIN projects p ON p.id = x.project_id`,
	embedSkill: `SELECT id, organization_id, project_id, text, sha256(convert_to(text, 'UTF8')) FROM (
		SELECT id, organization_id, project_id, name || E'\n' || description || E'\n' || draft AS text FROM skills) x`,
	embedKnowledge: `SELECT id, organization_id, NULL::uuid, text, sha256(convert_to(text, 'UTF8')) FROM (
		SELECT id, organization_id, title || E'\n' || body AS text FROM knowledge_entries) x`,
}

// IndexEmbeddings embeds up to batch items, skills and knowledge entries
// (each) whose text changed since they were last embedded, and stores the
// vectors for the semantic leg. It returns how many it embedded; a worker
// calls it until it returns 0 when an Embedder is configured.
func (db *DB) IndexEmbeddings(ctx context.Context, e Embedder, batch int) (int, error) {
	total := 0
	for _, typ := range []string{embedItem, embedSkill, embedKnowledge} {
		n, err := db.indexEmbeddings(ctx, e, typ, batch)
		if err != nil {
			return total, fmt.Errorf("store: index embeddings: %s: %w", typ, err)
		}
		total += n
	}
	return total, nil
}

// embedPending is a searchable thing whose text changed since it was last
// embedded.
type embedPending struct {
	id, org, project, text string
	hash                   []byte
}

func scanEmbedPending(row pgx.Row) (embedPending, error) {
	var p embedPending
	err := row.Scan(&p.id, &p.org, &p.project, &p.text, &p.hash)
	return p, err
}

func (db *DB) indexEmbeddings(ctx context.Context, e Embedder, typ string, batch int) (int, error) {
	rows, err := db.pool.Query(ctx, `
		WITH src (id, organization_id, project_id, text, hash) AS (`+embedSources[typ]+`)
		SELECT src.id::text, COALESCE(src.organization_id::text, ''), COALESCE(src.project_id::text, ''), src.text, src.hash
		FROM src LEFT JOIN search_embeddings se ON se.entity_type = $1 AND se.entity_id = src.id
		WHERE se.content_hash IS DISTINCT FROM src.hash LIMIT $2`, typ, batch)
	if err != nil {
		return 0, err
	}
	todo, err := collect(rows, scanEmbedPending)
	if err != nil || len(todo) == 0 {
		return 0, err
	}
	texts := make([]string, len(todo))
	for i, p := range todo {
		texts[i] = p.text
	}
	vecs, err := e.Embed(ctx, texts)
	if err != nil {
		return 0, err
	}
	if len(vecs) != len(todo) {
		return 0, fmt.Errorf("embedder returned %d vectors for %d texts", len(vecs), len(todo))
	}
	for i, p := range todo {
		if _, err := db.pool.Exec(ctx, `
			INSERT INTO search_embeddings (entity_type, entity_id, organization_id, project_id, content_hash, embedding)
			VALUES ($1, $2, NULLIF($3, '')::uuid, NULLIF($4, '')::uuid, $5, $6)
			ON CONFLICT (entity_type, entity_id) DO UPDATE SET organization_id = EXCLUDED.organization_id,
			    project_id = EXCLUDED.project_id, content_hash = EXCLUDED.content_hash,
			    embedding = EXCLUDED.embedding, updated_at = now()`,
			typ, p.id, p.org, p.project, p.hash, vecs[i]); err != nil {
			return i, err
		}
	}
	return len(todo), nil
}
