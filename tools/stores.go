package tools

import (
	"context"

	"github.com/balletplanner/ballet/store"
)

// ItemReader is what the tracker tools (list_items, get_item,
// list_runnable, search_project) read. *store.DB provides it.
type ItemReader interface {
	ListItems(ctx context.Context, caller store.Caller, projectKey string, f store.ItemFilter) ([]store.Item, error)
	GetItem(ctx context.Context, caller store.Caller, key string) (store.Item, error)
	ListDependencies(ctx context.Context, caller store.Caller, key string) ([]store.Dependency, error)
	Runnable(ctx context.Context, caller store.Caller, projectKey string) ([]store.Item, error)
	Search(ctx context.Context, caller store.Caller, sq store.SearchQuery) ([]store.SearchHit, error)
}

// ChangesetStore is what list_changesets and propose_changeset use; a
// proposal's Then runs in the store's own transaction. *store.DB provides it.
type ChangesetStore interface {
	ListChangesets(ctx context.Context, caller store.Caller, projectKey, status string) ([]store.Changeset, error)
	ProposeChangeset(ctx context.Context, caller store.Caller, projectKey string, p store.Proposal) (store.Changeset, error)
}

// SkillReader is what list_skills and read_skill read. *store.DB provides it.
type SkillReader interface {
	ProjectSkills(ctx context.Context, caller store.Caller, projectKey string) ([]store.EffectiveSkill, error)
	ResolveSkill(ctx context.Context, caller store.Caller, projectKey, name string) (store.ResolvedSkill, error)
}

// KnowledgeStore is what the knowledge tools (search_knowledge,
// get_knowledge, create_knowledge, update_knowledge) use; a write's Then
// runs in the store's own transaction. *store.DB provides it.
type KnowledgeStore interface {
	SearchKnowledge(ctx context.Context, caller store.Caller, orgKey string, ks store.KnowledgeSearch) ([]store.KnowledgeHit, error)
	GetKnowledge(ctx context.Context, caller store.Caller, orgKey, id string) (store.KnowledgeEntry, error)
	CreateKnowledge(ctx context.Context, caller store.Caller, orgKey string, n store.NewKnowledge) (store.KnowledgeEntry, error)
	UpdateKnowledge(ctx context.Context, caller store.Caller, orgKey, id string, u store.KnowledgeUpdate) (store.KnowledgeEntry, error)
}

// Store is everything the planner's tools use, one interface per concern.
// The worker provides it with its *store.DB when it runs a tool call.
type Store interface {
	ItemReader
	ChangesetStore
	SkillReader
	KnowledgeStore
}

var _ Store = (*store.DB)(nil)
