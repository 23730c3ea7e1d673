package store

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// Embedder turns texts into vectors for the semantic search leg.
type Embedder interface {
	// Model is the embedding model. Stored vectors record it, and a query
	// compares only vectors of its model.
	Model() string
	// Embed returns one vector per text, in order, all of one dimension.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Embedders gives the Embedder that meters to a scope: a project, or its
// organization when projectID is "". A nil Embedders, or one returning
// nil, turns the semantic leg off, leaving full-text and trigram fused
// alone.
type Embedders func(organizationID, projectID string) Embedder

// Entity types of search_embeddings.
const (
	embedItem      = "item"
	embedSkill     = "skill"
	embedKnowledge = "knowledge"
)

// queryEmbedding embeds the query text q for the semantic leg, metered to
// (organizationID, projectID). It returns nil when the leg is off: no
// Embedders, no scope to meter to (organizationID ""), no Embedder for the
// scope, or an embedding that failed (the gateway down, a budget spent).
// A failure is logged and never fails the search: the lexical legs still
// answer.
func queryEmbedding(ctx context.Context, es Embedders, organizationID, projectID, q string) (Embedder, []float32) {
	if es == nil || organizationID == "" {
		return nil, nil
	}
	e := es(organizationID, projectID)
	if e == nil {
		return nil, nil
	}
	vecs, err := e.Embed(ctx, []string{q})
	if err == nil && (len(vecs) != 1 || len(vecs[0]) == 0) {
		err = fmt.Errorf("embedder returned %d vectors for 1 text", len(vecs))
	}
	if err != nil {
		slog.Default().WarnContext(ctx, "search: semantic leg off for this query: embed query failed",
			"organization", organizationID, "project", projectID, "model", e.Model(), "err", err)
		return nil, nil
	}
	v := normalized(vecs[0])
	if v == nil {
		return nil, nil
	}
	return e, v
}

// semanticRank ranks the stored vectors of entityType and of e's model in
// the scope vs by cosine similarity to the query vector q, best first, at
// most searchCandidate ids; nil when the leg is off (e nil). It compares
// every vector of the scope (see rankVectors for the cost), in tx under a
// savepoint: a scan that fails, e.g. on the search's statement timeout,
// is logged and leaves the leg off, and the lexical legs still answer in
// the same transaction. The scope here only narrows the scan: the SQL of
// the search re-filters every id by the full read rule.
func semanticRank(ctx context.Context, tx pgx.Tx, e Embedder, q []float32, entityType string, vs vectorScope) []string {
	if e == nil || len(q) == 0 || vs.empty() {
		return nil
	}
	var ids []string
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		var err error
		ids, err = rankVectors(ctx, sp, e.Model(), entityType, q, vs, searchCandidate)
		return err
	})
	if err != nil {
		slog.Default().WarnContext(ctx, "search: semantic leg off for this query: rank vectors failed",
			"entity_type", entityType, "model", e.Model(), "err", err)
		return nil
	}
	return ids
}

// vectorScope is where the semantic leg reads vectors: everything, every
// entity of whole organizations, of single projects, or the
// organization-level entities (no project) of orgLevel.
type vectorScope struct {
	all                               bool
	organizations, projects, orgLevel []string
}

func (v vectorScope) empty() bool {
	return !v.all && len(v.organizations) == 0 && len(v.projects) == 0 && len(v.orgLevel) == 0
}

// vectorScopeOf is the vector scope of a read scope, plus the
// organization-level entities of orgLevel (skills of organizations whose
// organization skills are readable).
func vectorScopeOf(rs readScope, orgLevel []string) vectorScope {
	return vectorScope{all: rs.all, organizations: rs.organizations, projects: rs.projects, orgLevel: orgLevel}
}

// meteringScope is where Search meters its query embedding: the project
// searched, else the one organization the caller's read scopes lie in;
// ("", "") — the leg off — when they span several organizations or the
// whole platform.
func meteringScope(caller Caller, project Project, perms ...Permission) (org, projectID string) {
	if project.ID != "" {
		return project.OrganizationID, project.ID
	}
	p := caller.Principal
	if p == nil {
		return "", ""
	}
	for _, b := range p.Bindings {
		readable := false
		for _, perm := range perms {
			readable = readable || p.Can(perm, b.Scope.OrganizationID, b.Scope.ProjectID)
		}
		switch {
		case !readable:
			continue
		case b.Scope.Kind == ScopePlatform || b.Scope.OrganizationID == "":
			return "", ""
		case org == "":
			org = b.Scope.OrganizationID
		case org != b.Scope.OrganizationID:
			return "", ""
		}
	}
	return org, ""
}
