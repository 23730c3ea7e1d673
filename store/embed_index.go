package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// maxEmbedChars bounds the text embedded per entity: its first 8,000
// characters (key, title and description of an item; name, description
// and draft of a skill; title and body of a knowledge entry). That is
// within the input limit of common embedding models (8,192 tokens) for any
// text, and the beginning of a long text is what says what it is about.
const maxEmbedChars = 8000

var maxChars = strconv.Itoa(maxEmbedChars)

// Texts embedded per entity type: the text the full-text leg searches,
// bounded by maxEmbedChars.
var (
	itemText      = `left(i.key || E'\n' || i.title || E'\n' || i.description, ` + maxChars + `)`
	skillText     = `left(s.name || E'\n' || s.description || E'\n' || s.draft, ` + maxChars + `)`
	knowledgeText = `left(k.title || E'\n' || k.body, ` + maxChars + `)`
)

// embedScopeIDs selects the embeddable entities of one scope: entity type
// and id. $1 is the organization, $2 the project (” for an organization
// scope). Each branch reads only the scope's rows through an index: items
// by project, skills by organization or project, knowledge entries by
// organization. Platform skills are in no scope.
const embedScopeIDs = `
	SELECT 'item'::text AS entity_type, i.id AS entity_id
	FROM items i JOIN projects p ON p.id = i.project_id AND p.organization_id = $1::uuid
	WHERE $2 <> '' AND i.project_id = NULLIF($2, '')::uuid
	UNION ALL
	SELECT 'skill', s.id FROM skills s
	WHERE s.organization_id = $1::uuid AND (
	      ($2 <> '' AND s.scope_kind = 'project' AND s.project_id = NULLIF($2, '')::uuid)
	   OR ($2 = '' AND s.scope_kind = 'organization'))
	UNION ALL
	SELECT 'knowledge', k.id FROM knowledge_entries k
	WHERE $2 = '' AND k.organization_id = $1::uuid`

// embedTextOf is, for a row x(entity_type, entity_id), the entity's text,
// looked up by primary key.
var embedTextOf = `
	SELECT ` + itemText + ` FROM items i WHERE x.entity_type = 'item' AND i.id = x.entity_id
	UNION ALL SELECT ` + skillText + ` FROM skills s WHERE x.entity_type = 'skill' AND s.id = x.entity_id
	UNION ALL SELECT ` + knowledgeText + ` FROM knowledge_entries k WHERE x.entity_type = 'knowledge' AND k.id = x.entity_id`

// embedMissingSQL: the scope's entities without a vector of model $3
// (none yet, or one of another model), at most $4, with their text and its
// hash. It picks them by id first, so on a scope being filled an entity
// that has its vector costs one probe of the primary key of
// search_embeddings, and only the picked ones are read in full.
var embedMissingSQL = `
	WITH x AS (
		SELECT src.entity_type, src.entity_id FROM (` + embedScopeIDs + `) src
		WHERE NOT EXISTS (SELECT 1 FROM search_embeddings se
		    WHERE se.entity_type = src.entity_type AND se.entity_id = src.entity_id AND se.model = $3)
		LIMIT $4)
	SELECT x.entity_type, x.entity_id::text, t.text, sha256(convert_to(t.text, 'UTF8'))
	FROM x, LATERAL (` + embedTextOf + `) t(text)`

// embedChangedSQL: the scope's entities whose vector of model $3 was made
// from another text (content hash), at most $4: one pass over the scope's
// texts, hashed, each joined to its vector by primary key.
var embedChangedSQL = `
	SELECT c.entity_type, c.entity_id::text, c.text, c.hash FROM (
		SELECT 'item'::text AS entity_type, i.id AS entity_id, t.text, t.hash, se.content_hash
		FROM items i JOIN projects p ON p.id = i.project_id AND p.organization_id = $1::uuid
		JOIN search_embeddings se ON se.entity_type = 'item' AND se.entity_id = i.id AND se.model = $3,
		LATERAL (SELECT ` + itemText + ` AS text) x, LATERAL (SELECT x.text, sha256(convert_to(x.text, 'UTF8')) AS hash) t
		WHERE $2 <> '' AND i.project_id = NULLIF($2, '')::uuid
		UNION ALL
		SELECT 'skill', s.id, t.text, t.hash, se.content_hash FROM skills s
		JOIN search_embeddings se ON se.entity_type = 'skill' AND se.entity_id = s.id AND se.model = $3,
		LATERAL (SELECT ` + skillText + ` AS text) x, LATERAL (SELECT x.text, sha256(convert_to(x.text, 'UTF8')) AS hash) t
		WHERE s.organization_id = $1::uuid AND (
		      ($2 <> '' AND s.scope_kind = 'project' AND s.project_id = NULLIF($2, '')::uuid)
		   OR ($2 = '' AND s.scope_kind = 'organization'))
		UNION ALL
		SELECT 'knowledge', k.id, t.text, t.hash, se.content_hash FROM knowledge_entries k
		JOIN search_embeddings se ON se.entity_type = 'knowledge' AND se.entity_id = k.id AND se.model = $3,
		LATERAL (SELECT ` + knowledgeText + ` AS text) x, LATERAL (SELECT x.text, sha256(convert_to(x.text, 'UTF8')) AS hash) t
		WHERE $2 = '' AND k.organization_id = $1::uuid) c
	WHERE c.content_hash <> c.hash
	LIMIT $4`

// embedGoneSQL deletes the vectors stored for the scope whose entity no
// longer exists in it. The scope's vectors are found by index
// (search_embeddings_project_idx, search_embeddings_org_level_idx), and
// each entity by its primary key.
var embedGoneSQL = `
	DELETE FROM search_embeddings se
	WHERE se.organization_id = $1::uuid
	  AND (se.project_id = NULLIF($2, '')::uuid OR ($2 = '' AND se.project_id IS NULL))
	  AND NOT EXISTS (SELECT 1 FROM items i
	      WHERE se.entity_type = 'item' AND i.id = se.entity_id AND i.project_id = se.project_id)
	  AND NOT EXISTS (SELECT 1 FROM skills s
	      WHERE se.entity_type = 'skill' AND s.id = se.entity_id AND s.organization_id = se.organization_id
	        AND s.project_id IS NOT DISTINCT FROM se.project_id AND s.scope_kind <> 'platform')
	  AND NOT EXISTS (SELECT 1 FROM knowledge_entries k
	      WHERE se.entity_type = 'knowledge' AND k.id = se.entity_id AND k.organization_id = se.organization_id
	        AND se.project_id IS NULL)`

// embedPending is an entity of a scope whose vector is missing or stale.
type embedPending struct {
	typ, id, text string
	hash          []byte
}

func scanEmbedPending(row pgx.Row) (embedPending, error) {
	var p embedPending
	err := row.Scan(&p.typ, &p.id, &p.text, &p.hash)
	return p, err
}

// IndexEmbedScope embeds up to batch entities of the scope s whose vector
// is missing, of another model than e.Model(), or of changed text, in one
// call of e, and stores their vectors. It returns how many it embedded; 0
// means the scope is up to date, and that call also deletes the vectors of
// entities that no longer exist in the scope. A caller repeats it until it
// returns 0.
//
// It first takes entities without a vector of the model (a probe of the
// primary key each), then, for what is left of the batch, those whose text
// changed (a pass that hashes the scope's texts). Each call reads the
// whole scope once at most, so a scope of n entities costs about n/batch
// such reads to fill (BenchmarkIndexEmbedScope). It reads only the scope's
// rows: each source by an index on its project or organization, the
// stored vectors by their primary key or the scope's index
// (TestIndexEmbedScopeReadsOnlyItsScope checks the plans). The text sent
// per entity is bounded (maxEmbedChars). Platform-level skills are never
// embedded: no scope holds them.
func (db *DB) IndexEmbedScope(ctx context.Context, e Embedder, s EmbedScope, batch int) (int, error) {
	if e == nil || e.Model() == "" {
		return 0, errors.New("store: index embeddings: no embedder or no model")
	}
	if s.OrganizationID == "" || batch < 1 {
		return 0, fmt.Errorf("store: index embeddings: need an organization and a positive batch, got %+v, %d", s, batch)
	}
	model := e.Model()
	var todo []embedPending
	for _, sql := range []string{embedMissingSQL, embedChangedSQL} {
		if len(todo) == batch {
			break
		}
		rows, err := db.pool.Query(ctx, sql, s.OrganizationID, s.ProjectID, model, batch-len(todo))
		if err != nil {
			return 0, fmt.Errorf("store: index embeddings: %w", err)
		}
		more, err := collect(rows, scanEmbedPending)
		if err != nil {
			return 0, fmt.Errorf("store: index embeddings: %w", err)
		}
		todo = append(todo, more...)
	}
	if len(todo) == 0 {
		if _, err := db.pool.Exec(ctx, embedGoneSQL, s.OrganizationID, s.ProjectID); err != nil {
			return 0, fmt.Errorf("store: index embeddings: delete stale vectors: %w", err)
		}
		return 0, nil
	}
	texts := make([]string, len(todo))
	for i, p := range todo {
		texts[i] = p.text
	}
	vecs, err := e.Embed(ctx, texts)
	if err != nil {
		return 0, fmt.Errorf("store: index embeddings: embed %d texts: %w", len(texts), err)
	}
	if len(vecs) != len(todo) {
		return 0, fmt.Errorf("store: index embeddings: embedder returned %d vectors for %d texts", len(vecs), len(todo))
	}
	types, ids, hashes, blobs := make([]string, 0, len(todo)), make([]string, 0, len(todo)), make([][]byte, 0, len(todo)), make([][]byte, 0, len(todo))
	for i, p := range todo {
		b := encodeVector(vecs[i])
		if len(b) == 0 {
			continue // a zero vector compares with nothing
		}
		types, ids, hashes, blobs = append(types, p.typ), append(ids, p.id), append(hashes, p.hash), append(blobs, b)
	}
	_, err = db.pool.Exec(ctx, `
		INSERT INTO search_embeddings (entity_type, entity_id, organization_id, project_id, model, content_hash, embedding)
		SELECT t, id, $5::uuid, NULLIF($6, '')::uuid, $7, h, v FROM unnest($1::text[], $2::uuid[], $3::bytea[], $4::bytea[]) AS u(t, id, h, v)
		ON CONFLICT (entity_type, entity_id) DO UPDATE SET organization_id = EXCLUDED.organization_id,
		    project_id = EXCLUDED.project_id, model = EXCLUDED.model, content_hash = EXCLUDED.content_hash,
		    embedding = EXCLUDED.embedding, updated_at = now()`,
		types, ids, hashes, blobs, s.OrganizationID, s.ProjectID, model)
	if err != nil {
		return 0, fmt.Errorf("store: index embeddings: store vectors: %w", err)
	}
	return len(todo), nil
}

// EmbeddingCounts counts the stored vectors of model (current) and of
// other models (other, re-embedded as their scopes are indexed).
func (db *DB) EmbeddingCounts(ctx context.Context, model string) (current, other int64, err error) {
	err = db.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE model = $1), count(*) FILTER (WHERE model <> $1) FROM search_embeddings`,
		model).Scan(&current, &other)
	if err != nil {
		return 0, 0, fmt.Errorf("store: embedding counts: %w", err)
	}
	return current, other, nil
}

// VectorExtension reports the pgvector extension installed in the
// database as "vector <version>", or "" when there is none. The semantic
// leg scans vectors in Go either way; a start-up log line says which is
// available (docs/decisions.md: what the switch to an HNSW index is).
func (db *DB) VectorExtension(ctx context.Context) (string, error) {
	var v string
	err := db.pool.QueryRow(ctx, `SELECT COALESCE((SELECT 'vector ' || extversion FROM pg_extension WHERE extname = 'vector'), '')`).Scan(&v)
	if err != nil {
		return "", fmt.Errorf("store: vector extension: %w", err)
	}
	return v, nil
}
