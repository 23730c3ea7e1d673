package store

import (
	"sort"

	"github.com/jackc/pgx/v5"
)

// The hybrid search statements. Each leg ranks at most $3 candidates; the
// fused CTE sums 1/(k + rank) over the legs an id appears in (reciprocal
// rank fusion) and keeps the best $2. The semantic leg is an array of ids
// ranked in Go (empty when the leg is off), re-filtered here by
// the same read scope as the other legs.

// itemSearchSQL: $1 q, $2 limit, $3 candidates, $4 all, $5 organization
// ids, $6 project ids, $7 semantic ids, $8 k, $9 headline options.
const itemSearchSQL = `
WITH q AS (SELECT websearch_to_tsquery('english', $1) AS tsq),
fts AS (
	SELECT i.id, row_number() OVER (ORDER BY ts_rank_cd(i.search, q.tsq) DESC, i.id) AS r
	FROM items i JOIN projects p ON p.id = i.project_id, q
	WHERE i.search @@ websearch_to_tsquery('english', $1)
	  AND ($4::bool OR p.organization_id = ANY($5::uuid[]) OR i.project_id = ANY($6::uuid[]))
	ORDER BY r LIMIT $3),
trg AS (
	SELECT i.id, row_number() OVER (ORDER BY (i.key = upper($1)) DESC, word_similarity($1, i.title) DESC, i.id) AS r
	FROM items i JOIN projects p ON p.id = i.project_id
	WHERE (i.key = upper($1) OR $1 <% i.title)
	  AND ($4::bool OR p.organization_id = ANY($5::uuid[]) OR i.project_id = ANY($6::uuid[]))
	ORDER BY r LIMIT $3),
sem AS (
	SELECT t.id, t.r FROM unnest($7::uuid[]) WITH ORDINALITY AS t(id, r)
	JOIN items i ON i.id = t.id JOIN projects p ON p.id = i.project_id
	WHERE $4::bool OR p.organization_id = ANY($5::uuid[]) OR i.project_id = ANY($6::uuid[])),
fused AS (
	SELECT id, sum(1.0 / ($8::int + r)) AS score
	FROM (SELECT id, r FROM fts UNION ALL SELECT id, r FROM trg UNION ALL SELECT id, r FROM sem) legs
	GROUP BY id ORDER BY score DESC, id LIMIT $2)
SELECT i.id, i.key, i.title, i.kind, i.state, p.key,
	ts_headline('english', i.title || E'\n' || i.description, q.tsq, $9), f.score::float8
FROM fused f JOIN items i ON i.id = f.id JOIN projects p ON p.id = i.project_id, q
ORDER BY f.score DESC, i.key`

// scanItemHit reads a row of itemSearchSQL.
func scanItemHit(row pgx.Row) (SearchHit, error) {
	h := SearchHit{Kind: SearchItems}
	err := row.Scan(&h.ID, &h.Key, &h.Title, &h.Type, &h.State, &h.Project, &h.Snippet, &h.Score)
	return h, err
}

// skillSearchSQL: $1 q, $2 limit, $3 candidates, $4 all, $5 organizations
// whose organization skills are readable, $6 organizations whose project
// skills are all readable, $7 project ids, $8 semantic ids, $9 k, $10
// headline options. Platform skills are readable by any skill reader.
const skillSearchSQL = `
WITH q AS (SELECT websearch_to_tsquery('english', $1) AS tsq),
visible AS NOT MATERIALIZED (
	SELECT s.* FROM skills s
	WHERE $4::bool OR s.scope_kind = 'platform'
	   OR (s.scope_kind = 'organization' AND s.organization_id = ANY($5::uuid[]))
	   OR (s.scope_kind = 'project' AND (s.project_id = ANY($7::uuid[]) OR s.organization_id = ANY($6::uuid[])))),
fts AS (
	SELECT s.id, row_number() OVER (ORDER BY ts_rank_cd(s.search, q.tsq) DESC, s.id) AS r
	FROM visible s, q WHERE s.search @@ websearch_to_tsquery('english', $1)
	ORDER BY r LIMIT $3),
trg AS (
	SELECT s.id, row_number() OVER (ORDER BY GREATEST(similarity(s.name, $1), word_similarity($1, s.name),
		word_similarity($1, s.description)) DESC, s.id) AS r
	FROM visible s WHERE s.name % $1 OR $1 <% s.name OR $1 <% s.description
	ORDER BY r LIMIT $3),
sem AS (
	SELECT t.id, t.r FROM unnest($8::uuid[]) WITH ORDINALITY AS t(id, r) JOIN visible s ON s.id = t.id),
fused AS (
	SELECT id, sum(1.0 / ($9::int + r)) AS score
	FROM (SELECT id, r FROM fts UNION ALL SELECT id, r FROM trg UNION ALL SELECT id, r FROM sem) legs
	GROUP BY id ORDER BY score DESC, id LIMIT $2)
SELECT s.id, s.name, s.scope_kind, COALESCE(o.key, ''), COALESCE(p.key, ''),
	ts_headline('english', s.description || E'\n' || s.draft, q.tsq, $10), f.score::float8
FROM fused f JOIN skills s ON s.id = f.id
	LEFT JOIN organizations o ON o.id = s.organization_id LEFT JOIN projects p ON p.id = s.project_id, q
ORDER BY f.score DESC, s.name`

// scanSkillHit reads a row of skillSearchSQL.
func scanSkillHit(row pgx.Row) (SearchHit, error) {
	h := SearchHit{Kind: SearchSkills}
	var kind, orgKey, projectKey string
	err := row.Scan(&h.ID, &h.Name, &kind, &orgKey, &projectKey, &h.Snippet, &h.Score)
	h.Title, h.Scope = h.Name, scopeString(kind, orgKey, projectKey)
	return h, err
}

// knowledgeSearchSQL: $1 q, $2 limit, $3 candidates, $4 organization id,
// $5 kind (empty: any), $6 project key (empty: any), $7 semantic ids, $8 k, $9 headline
// options.
const knowledgeSearchSQL = `
WITH q AS (SELECT websearch_to_tsquery('english', $1) AS tsq),
visible AS NOT MATERIALIZED (
	SELECT k.* FROM knowledge_entries k
	WHERE k.organization_id = $4 AND ($5 = '' OR k.kind = $5) AND ($6 = '' OR $6 = ANY(k.projects))),
fts AS (
	SELECT k.id, row_number() OVER (ORDER BY ts_rank_cd(k.search, q.tsq) DESC, k.id) AS r
	FROM visible k, q WHERE k.search @@ websearch_to_tsquery('english', $1)
	ORDER BY r LIMIT $3),
trg AS (
	SELECT k.id, row_number() OVER (ORDER BY GREATEST(similarity(k.title, $1), word_similarity($1, k.title)) DESC, k.id) AS r
	FROM visible k WHERE k.title % $1 OR $1 <% k.title
	ORDER BY r LIMIT $3),
sem AS (
	SELECT t.id, t.r FROM unnest($7::uuid[]) WITH ORDINALITY AS t(id, r) JOIN visible k ON k.id = t.id),
fused AS (
	SELECT id, sum(1.0 / ($8::int + r)) AS score
	FROM (SELECT id, r FROM fts UNION ALL SELECT id, r FROM trg UNION ALL SELECT id, r FROM sem) legs
	GROUP BY id ORDER BY score DESC, id LIMIT $2)
SELECT k.id, k.kind, k.title, k.projects, k.items, k.version, k.updated_at,
	ts_headline('english', k.title || E'\n' || k.body, q.tsq, $9), f.score::float8
FROM fused f JOIN knowledge_entries k ON k.id = f.id, q
ORDER BY f.score DESC, k.updated_at DESC`

// scanKnowledgeHit reads a row of knowledgeSearchSQL.
func scanKnowledgeHit(row pgx.Row) (KnowledgeHit, error) {
	var h KnowledgeHit
	err := row.Scan(&h.ID, &h.Kind, &h.Title, &h.Projects, &h.Items, &h.Version, &h.UpdatedAt, &h.Snippet, &h.Score)
	return h, err
}

// sortHits orders hits best first; ties go to items, then by title.
func sortHits(h []SearchHit) {
	sort.SliceStable(h, func(i, j int) bool {
		if h[i].Score != h[j].Score {
			return h[i].Score > h[j].Score
		}
		if h[i].Kind != h[j].Kind {
			return h[i].Kind == SearchItems
		}
		return h[i].Title < h[j].Title
	})
}
