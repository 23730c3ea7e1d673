package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Search is hybrid (SPEC §6, §10): a full-text leg (websearch_to_tsquery,
// ranked by ts_rank_cd), a pg_trgm similarity leg (typos, and item keys
// such as WEB-12 matched case-insensitively) and, when the query carries
// Embedders, a semantic leg (store/embed.go: every stored vector of the
// read scope and the current model, compared in Go), fused by reciprocal
// rank: score = Σ 1/(rrfK+rank).
// The query text only ever travels as a bind parameter and through
// websearch_to_tsquery, which accepts any input, so quotes, operators and
// other metacharacters give plain results, never an error.
const (
	rrfK            = 60
	searchCandidate = 100 // candidates taken from each leg before fusion
	maxSearchLimit  = 50
	defaultLimit    = 20
)

// headlineOptions shape snippets: up to two fragments, hits in **bold**.
const headlineOptions = `MaxFragments=2, MaxWords=25, MinWords=8, StartSel=**, StopSel=**, FragmentDelimiter=" … "`

// Search kinds of GET /search.
const (
	SearchItems  = "item"
	SearchSkills = "skill"
)

// SearchQuery asks Search for items and skills. Kind "" searches both
// (each kind the caller may read); Project "" searches every project the
// caller may read. Limit is 1-50, default 20.
type SearchQuery struct {
	Q       string
	Kind    string
	Project string
	Limit   int
	// Embedders turns on the semantic leg; nil (the default) leaves it
	// off. The query embedding is metered to the project searched, else to
	// the one organization the caller reads in; a caller reading in several
	// organizations searches without the leg.
	Embedders Embedders
}

// SearchHit is one result of Search. Items carry Key, Type (the item kind),
// State and Project; skills carry Name and Scope.
type SearchHit struct {
	Kind    string  `json:"kind"`
	ID      string  `json:"id"`
	Key     string  `json:"key,omitempty"`
	Name    string  `json:"name,omitempty"`
	Title   string  `json:"title"`
	Type    string  `json:"type,omitempty"`
	State   string  `json:"state,omitempty"`
	Project string  `json:"project,omitempty"`
	Scope   string  `json:"scope,omitempty"`
	Snippet string  `json:"snippet"`
	Score   float64 `json:"score"`
}

// cleanQuery validates the query text (see searchLimits.checkQuery) and
// the limit. NUL bytes and invalid UTF-8, which Postgres text cannot hold,
// become spaces.
func (l searchLimits) cleanQuery(q string, limit int) (string, int, error) {
	q = strings.TrimSpace(strings.ToValidUTF8(strings.ReplaceAll(q, "\x00", " "), " "))
	if q == "" {
		return "", 0, Errorf(CodeInvalid, "q: must not be empty")
	}
	if err := l.checkQuery(q); err != nil {
		return "", 0, err
	}
	switch {
	case limit == 0:
		limit = defaultLimit
	case limit < 1 || limit > maxSearchLimit:
		return "", 0, Errorf(CodeInvalid, "limit: must be 1-%d, got %d", maxSearchLimit, limit)
	}
	return q, limit, nil
}

// readScope is where a caller may read: everything, whole organizations,
// or single projects (ids).
type readScope struct {
	all           bool
	organizations []string
	projects      []string
}

func (r readScope) empty() bool { return !r.all && len(r.organizations) == 0 && len(r.projects) == 0 }

// readScopeOf collects where p holds perm, from its bindings.
func readScopeOf(p *Principal, perm Permission) readScope {
	var r readScope
	if p == nil {
		return r
	}
	for _, b := range p.Bindings {
		if !p.Can(perm, b.Scope.OrganizationID, b.Scope.ProjectID) {
			continue
		}
		switch b.Scope.Kind {
		case ScopePlatform:
			r.all = true
		case ScopeOrganization:
			r.organizations = append(r.organizations, b.Scope.OrganizationID)
		case ScopeProject:
			r.projects = append(r.projects, b.Scope.ProjectID)
		}
	}
	return r
}

// Search finds items (tracker.read) and skills (skill.read) the caller may
// read, best first. With a project, items are that project's and skills
// those that apply to it (platform, its organization, itself); an explicit
// kind the caller may not read there is refused, an implicit one skipped.
func (db *DB) Search(ctx context.Context, caller Caller, sq SearchQuery) ([]SearchHit, error) {
	q, limit, err := db.search.cleanQuery(sq.Q, sq.Limit)
	if err != nil {
		return nil, fmt.Errorf("store: search: %w", err)
	}
	if sq.Kind != "" && sq.Kind != SearchItems && sq.Kind != SearchSkills {
		return nil, fmt.Errorf("store: search: %w", Errorf(CodeInvalid, "kind: must be item or skill, got %q", sq.Kind))
	}
	itemScope := readScopeOf(caller.Principal, PermTrackerRead)
	skillScope := readScopeOf(caller.Principal, PermSkillRead)
	var project Project
	if sq.Project != "" {
		if project, err = db.ProjectByKey(ctx, sq.Project); err != nil {
			return nil, fmt.Errorf("store: search: %w", err)
		}
		var itemErr, skillErr error
		itemScope, itemErr = projectScope(caller, PermTrackerRead, project)
		skillScope, skillErr = projectScope(caller, PermSkillRead, project)
		switch {
		case IsCode(itemErr, CodeNotFound) && IsCode(skillErr, CodeNotFound):
			return nil, fmt.Errorf("store: search: %w", Errorf(CodeNotFound, "project %q not found", sq.Project))
		case sq.Kind == SearchItems && itemErr != nil:
			return nil, fmt.Errorf("store: search: %w", itemErr)
		case sq.Kind == SearchSkills && skillErr != nil:
			return nil, fmt.Errorf("store: search: %w", skillErr)
		case sq.Kind == "" && itemErr != nil && skillErr != nil:
			return nil, fmt.Errorf("store: search: %w", itemErr)
		}
	}
	items := (sq.Kind == "" || sq.Kind == SearchItems) && !itemScope.empty()
	skills := (sq.Kind == "" || sq.Kind == SearchSkills) && !skillScope.empty()
	// The query embedding (a call to the gateway) and the organizations of
	// skills are looked up before the search takes its connection; the
	// vectors are ranked inside it, under the gate and the timeout.
	var skillOrgs []string
	var e Embedder
	var qv []float32
	if items || skills {
		org, pid := meteringScope(caller, project, PermTrackerRead, PermSkillRead)
		e, qv = queryEmbedding(ctx, sq.Embedders, org, pid, q)
	}
	if skills {
		skillOrgs = db.skillOrganizations(ctx, skillScope, project)
	}
	var hits []SearchHit
	err = db.searchTx(ctx, searchTenant(caller, project.OrganizationID), func(tx pgx.Tx) error {
		if items {
			sem := semanticRank(ctx, tx, e, qv, embedItem, vectorScopeOf(itemScope, nil))
			h, err := searchItems(ctx, tx, q, limit, itemScope, sem)
			if err != nil {
				return fmt.Errorf("items: %w", err)
			}
			hits = append(hits, h...)
		}
		if skills {
			sem := semanticRank(ctx, tx, e, qv, embedSkill, vectorScopeOf(skillScope, skillOrgs))
			h, err := searchSkills(ctx, tx, q, limit, skillScope, skillOrgs, sem)
			if err != nil {
				return fmt.Errorf("skills: %w", err)
			}
			hits = append(hits, h...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: search: %w", err)
	}
	return topHits(hits, limit), nil
}

// projectScope authorizes perm on one project and returns it as the scope.
func projectScope(caller Caller, perm Permission, p Project) (readScope, error) {
	if err := caller.Authorize(perm, p.OrganizationID, p.ID); err != nil {
		return readScope{}, err
	}
	return readScope{projects: []string{p.ID}}, nil
}

// topHits merges per-kind lists (each sorted by score) into the best limit.
func topHits(hits []SearchHit, limit int) []SearchHit {
	sortHits(hits)
	if len(hits) > limit {
		hits = hits[:limit]
	}
	if hits == nil {
		hits = []SearchHit{}
	}
	return hits
}

func searchItems(ctx context.Context, tx pgx.Tx, q string, limit int, rs readScope, sem []string) ([]SearchHit, error) {
	rows, err := tx.Query(ctx, itemSearchSQL, q, limit, searchCandidate,
		rs.all, nonNil(rs.organizations), nonNil(rs.projects), nonNil(sem), rrfK, headlineOptions)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanItemHit)
}

// skillOrganizations are the organizations whose organization skills a
// search may return. Platform skills are readable by whoever reads skills
// anywhere; organization skills by whoever reads them in the organization.
func (db *DB) skillOrganizations(ctx context.Context, rs readScope, project Project) []string {
	if project.ID != "" {
		return []string{project.OrganizationID}
	}
	orgs := nonNil(rs.organizations)
	for _, pid := range rs.projects {
		if oid := projectOrganization(ctx, db, pid); oid != "" {
			orgs = append(orgs, oid)
		}
	}
	return orgs
}

func searchSkills(ctx context.Context, tx pgx.Tx, q string, limit int, rs readScope, orgs, sem []string) ([]SearchHit, error) {
	rows, err := tx.Query(ctx, skillSearchSQL, q, limit, searchCandidate,
		rs.all, orgs, nonNil(rs.organizations), nonNil(rs.projects), nonNil(sem), rrfK, headlineOptions)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanSkillHit)
}

// projectOrganization is the organization of a project id, "" if none.
func projectOrganization(ctx context.Context, db *DB, projectID string) string {
	var id string
	_ = db.pool.QueryRow(ctx, `SELECT organization_id::text FROM projects WHERE id = $1`, projectID).Scan(&id)
	return id
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// KnowledgeSearch asks SearchKnowledge. Kind and Project (a key) filter;
// Limit is 1-50, default 20.
type KnowledgeSearch struct {
	Q       string
	Kind    string
	Project string
	Limit   int
	// Embedders turns on the semantic leg, metered to the organization;
	// nil (the default) leaves it off.
	Embedders Embedders
}

// KnowledgeHit is one result of SearchKnowledge: the entry without its
// body, a snippet and the fused score.
type KnowledgeHit struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Title     string    `json:"title"`
	Projects  []string  `json:"projects"`
	Items     []string  `json:"items"`
	Version   int       `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
	Snippet   string    `json:"snippet"`
	Score     float64   `json:"score"`
}

// SearchKnowledge searches the organization's knowledge space
// (knowledge.read), best first.
func (db *DB) SearchKnowledge(ctx context.Context, caller Caller, orgKey string, ks KnowledgeSearch) ([]KnowledgeHit, error) {
	q, limit, err := db.search.cleanQuery(ks.Q, ks.Limit)
	if err != nil {
		return nil, fmt.Errorf("store: search knowledge: %w", err)
	}
	if ks.Kind != "" {
		if err := validKnowledgeKind(ks.Kind); err != nil {
			return nil, fmt.Errorf("store: search knowledge: %w", err)
		}
	}
	org, err := db.knowledgeOrg(ctx, caller, orgKey)
	if err != nil {
		return nil, fmt.Errorf("store: search knowledge: %w", err)
	}
	e, qv := queryEmbedding(ctx, ks.Embedders, org.ID, "", q)
	var hits []KnowledgeHit
	err = db.searchTx(ctx, org.ID, func(tx pgx.Tx) error {
		sem := semanticRank(ctx, tx, e, qv, embedKnowledge, vectorScope{orgLevel: []string{org.ID}})
		rows, err := tx.Query(ctx, knowledgeSearchSQL, q, limit, searchCandidate, org.ID, ks.Kind,
			strings.ToUpper(ks.Project), nonNil(sem), rrfK, headlineOptions)
		if err != nil {
			return err
		}
		hits, err = collect(rows, scanKnowledgeHit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: search knowledge: %w", err)
	}
	return hits, nil
}
