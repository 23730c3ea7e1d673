package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// maxEmbedChars bounds the text embedded per entity: its first 8,000
// characters (key, title and description of an item; name, description
// and draft of a skill; title and body of a knowledge entry). That is
// within the input limit of common embedding models (8,192 tokens) for any
// text, and the beginning of a long text is what says what it is about.
const maxEmbedChars = 8000

// embedScanLimit is how many stale entities one call of IndexEmbedScope
// finds in its scan of the scope, and embeds. A scope of up to this many
// entities is filled by one scan (and a second that finds it up to date);
// a larger one by one scan per embedScanLimit entities. It bounds a call
// to embedScanLimit texts: 157 embeddings calls at the default batch of
// 64, within an embed task's timeout at any usual provider latency.
const embedScanLimit = 10000

// embedGroupTexts is about how many texts IndexEmbedScope reads in one
// statement and stores in one, in as many calls of the embedder as the
// batch needs: a commit per group, not per call.
const embedGroupTexts = 512

var maxChars = strconv.Itoa(maxEmbedChars)

// Texts embedded per entity type: the text the full-text leg searches,
// bounded by maxEmbedChars.
var (
	itemText      = `left(i.key || E'\n' || i.title || E'\n' || i.description, ` + maxChars + `)`
	skillText     = `left(s.name || E'\n' || s.description || E'\n' || s.draft, ` + maxChars + `)`
	knowledgeText = `left(k.title || E'\n' || k.body, ` + maxChars + `)`
)

// Scope conditions, $1 the organization and $2 the project (” for an
// organization scope): the entities of a scope are a project's items and
// project skills, or an organization's knowledge entries and
// organization skills. Platform skills are in no scope.
const (
	itemInScope      = `$2 <> '' AND i.project_id = NULLIF($2, '')::uuid`
	skillInScope     = `s.organization_id = $1::uuid AND (($2 <> '' AND s.scope_kind = 'project' AND s.project_id = NULLIF($2, '')::uuid) OR ($2 = '' AND s.scope_kind = 'organization'))`
	knowledgeInScope = `$2 = '' AND k.organization_id = $1::uuid`
)

// staleIf is the condition on an entity joined (LEFT JOIN) to its vector
// se that the vector is missing, of another model than $3, or made from
// another text than text: the text is read and hashed only for a vector
// of the model.
func staleIf(text string) string {
	return `CASE WHEN se.entity_id IS NULL OR se.model <> $3 THEN true
	        ELSE se.content_hash <> sha256(convert_to(` + text + `, 'UTF8')) END`
}

// embedStaleSQL: the scope's stale entities (staleIf), ids only, in
// (entity type, id) order, at most $4. One pass over the scope: each
// source read through an index on its project or organization, each
// entity joined to its vector by primary key.
var embedStaleSQL = `
	SELECT c.entity_type, c.entity_id::text FROM (
		SELECT 'item'::text AS entity_type, i.id AS entity_id
		FROM items i JOIN projects p ON p.id = i.project_id AND p.organization_id = $1::uuid
		LEFT JOIN search_embeddings se ON se.entity_type = 'item' AND se.entity_id = i.id
		WHERE ` + itemInScope + ` AND ` + staleIf(itemText) + `
		UNION ALL
		SELECT 'skill', s.id FROM skills s
		LEFT JOIN search_embeddings se ON se.entity_type = 'skill' AND se.entity_id = s.id
		WHERE ` + skillInScope + ` AND ` + staleIf(skillText) + `
		UNION ALL
		SELECT 'knowledge', k.id FROM knowledge_entries k
		LEFT JOIN search_embeddings se ON se.entity_type = 'knowledge' AND se.entity_id = k.id
		WHERE ` + knowledgeInScope + ` AND ` + staleIf(knowledgeText) + `) c
	ORDER BY c.entity_type, c.entity_id
	LIMIT $4`

// embedTextsSQL: the texts, and their hashes, of the entities ($3 types,
// $4 ids) that are still in the scope, each looked up by primary key.
var embedTextsSQL = `
	SELECT x.entity_type, x.entity_id::text, t.text, sha256(convert_to(t.text, 'UTF8'))
	FROM unnest($3::text[], $4::uuid[]) AS x(entity_type, entity_id), LATERAL (
		SELECT ` + itemText + ` FROM items i
		WHERE x.entity_type = 'item' AND i.id = x.entity_id AND ` + itemInScope + `
		UNION ALL SELECT ` + skillText + ` FROM skills s
		WHERE x.entity_type = 'skill' AND s.id = x.entity_id AND ` + skillInScope + `
		UNION ALL SELECT ` + knowledgeText + ` FROM knowledge_entries k
		WHERE x.entity_type = 'knowledge' AND k.id = x.entity_id AND ` + knowledgeInScope + `) t(text)`

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

// embedUpsertSQL stores the vectors of a scope's entities.
const embedUpsertSQL = `
	INSERT INTO search_embeddings (entity_type, entity_id, organization_id, project_id, model, content_hash, embedding)
	SELECT t, id, $5::uuid, NULLIF($6, '')::uuid, $7, h, v FROM unnest($1::text[], $2::uuid[], $3::bytea[], $4::bytea[]) AS u(t, id, h, v)
	ON CONFLICT (entity_type, entity_id) DO UPDATE SET organization_id = EXCLUDED.organization_id,
	    project_id = EXCLUDED.project_id, model = EXCLUDED.model, content_hash = EXCLUDED.content_hash,
	    embedding = EXCLUDED.embedding, updated_at = now()`

// embedRef is an entity of a scope: its type and id.
type embedRef struct{ typ, id string }

func scanEmbedRef(row pgx.Row) (embedRef, error) {
	var r embedRef
	err := row.Scan(&r.typ, &r.id)
	return r, err
}

// embedPending is an entity to embed: its text and the text's hash.
type embedPending struct {
	embedRef
	text string
	hash []byte
}

func scanEmbedPending(row pgx.Row) (embedPending, error) {
	var p embedPending
	err := row.Scan(&p.typ, &p.id, &p.text, &p.hash)
	return p, err
}

// IndexEmbedScope embeds the entities of the scope s whose vector is
// missing, of another model than e.Model(), or of changed text, and
// stores their vectors; it returns how many it stored. 0 means the scope
// is up to date, and that call also deletes the vectors of entities that
// no longer exist in the scope. A caller repeats it until it returns 0;
// after an error, the count is of the vectors stored before it.
//
// One scan of the scope finds up to embedScanLimit stale entities (ids
// only). Their texts are then read (and hashed) about embedGroupTexts at
// a time, embedded in calls of e of at most batch texts, and stored with
// the hash of the text read: a change committed after that read leaves
// the stored hash stale, so the next call embeds it again. Filling a scope
// of n entities thus costs n/embedScanLimit + 1 scans of it, and a read
// and a write per group (BenchmarkIndexEmbedScope). Every statement reads
// only the scope's rows: each source by an index on its project or
// organization, the stored vectors by their primary key or the scope's
// index (TestIndexEmbedScopeReadsOnlyItsScope checks the plans). The
// text sent per entity is bounded (maxEmbedChars). Platform-level skills
// are never embedded: no scope holds them.
func (db *DB) IndexEmbedScope(ctx context.Context, e Embedder, s EmbedScope, batch int) (int, error) {
	return db.indexEmbedScope(ctx, e, s, batch, embedScanLimit)
}

// indexEmbedScope is IndexEmbedScope with at most limit entities per scan.
func (db *DB) indexEmbedScope(ctx context.Context, e Embedder, s EmbedScope, batch, limit int) (int, error) {
	if e == nil || e.Model() == "" {
		return 0, errors.New("store: index embeddings: no embedder or no model")
	}
	if s.OrganizationID == "" || batch < 1 {
		return 0, fmt.Errorf("store: index embeddings: need an organization and a positive batch, got %+v, %d", s, batch)
	}
	model := e.Model()
	for {
		rows, err := db.pool.Query(ctx, embedStaleSQL, s.OrganizationID, s.ProjectID, model, limit)
		if err != nil {
			return 0, fmt.Errorf("store: index embeddings: find stale entities: %w", err)
		}
		stale, err := collect(rows, scanEmbedRef)
		if err != nil {
			return 0, fmt.Errorf("store: index embeddings: find stale entities: %w", err)
		}
		if len(stale) == 0 {
			if _, err := db.pool.Exec(ctx, embedGoneSQL, s.OrganizationID, s.ProjectID); err != nil {
				return 0, fmt.Errorf("store: index embeddings: delete stale vectors: %w", err)
			}
			return 0, nil
		}
		stored := 0
		for group := range slices.Chunk(stale, max(batch, embedGroupTexts/batch*batch)) {
			n, err := db.embedGroup(ctx, e, s, model, batch, group)
			stored += n
			if err != nil {
				return stored, err
			}
		}
		if stored > 0 {
			return stored, nil
		}
		// Every entity found was deleted before its text was read: scan
		// again, for those past the limit.
	}
}

// embedGroup reads the texts of the entities refs still in the scope,
// embeds them in calls of e of at most batch texts, and stores their
// vectors in one statement; it returns how many it stored. When a call
// fails, the vectors of the calls before it are stored.
func (db *DB) embedGroup(ctx context.Context, e Embedder, s EmbedScope, model string, batch int, refs []embedRef) (int, error) {
	types, ids := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		types[i], ids[i] = r.typ, r.id
	}
	rows, err := db.pool.Query(ctx, embedTextsSQL, s.OrganizationID, s.ProjectID, types, ids)
	if err != nil {
		return 0, fmt.Errorf("store: index embeddings: read texts: %w", err)
	}
	todo, err := collect(rows, scanEmbedPending)
	if err != nil {
		return 0, fmt.Errorf("store: index embeddings: read texts: %w", err)
	}
	blobs := make([][]byte, 0, len(todo))
	var embedErr error
	for chunk := range slices.Chunk(todo, batch) {
		texts := make([]string, len(chunk))
		for i, p := range chunk {
			texts[i] = p.text
		}
		vecs, err := e.Embed(ctx, texts)
		if err == nil && len(vecs) != len(chunk) {
			err = fmt.Errorf("embedder returned %d vectors for %d texts", len(vecs), len(chunk))
		}
		if err != nil {
			embedErr = fmt.Errorf("store: index embeddings: embed %d texts: %w", len(texts), err)
			break
		}
		// A zero vector is stored empty: it compares with nothing, and its
		// text counts as embedded until it changes.
		for _, v := range vecs {
			blobs = append(blobs, encodeVector(v))
		}
	}
	done := todo[:len(blobs)]
	if len(done) == 0 {
		return 0, embedErr // nothing embedded, or every entity deleted since the scan
	}
	types, ids = types[:0], ids[:0]
	hashes := make([][]byte, 0, len(done))
	for _, p := range done {
		types, ids, hashes = append(types, p.typ), append(ids, p.id), append(hashes, p.hash)
	}
	if _, err := db.pool.Exec(ctx, embedUpsertSQL, types, ids, hashes, blobs, s.OrganizationID, s.ProjectID, model); err != nil {
		return 0, errors.Join(embedErr, fmt.Errorf("store: index embeddings: store vectors: %w", err))
	}
	return len(done), embedErr
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
