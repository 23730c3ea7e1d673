package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/balletplanner/ballet/store"
)

// itemSummary is an item in a list: enough to pick one and fetch it.
type itemSummary struct {
	Key       string `json:"key"`
	Kind      string `json:"kind"`
	Title     string `json:"title"`
	State     string `json:"state"`
	Type      string `json:"type,omitempty"`
	Epic      string `json:"epic,omitempty"`
	Milestone string `json:"milestone,omitempty"`
	Version   int64  `json:"version"`
}

func summarize(it store.Item) itemSummary {
	return itemSummary{Key: it.Key, Kind: it.Kind, Title: it.Title, State: it.State, Type: it.Type,
		Epic: it.Epic, Milestone: it.Milestone, Version: it.Version}
}

// itemList is a capped list of items.
type itemList struct {
	Items     []itemSummary `json:"items"`
	Count     int           `json:"count"`
	Total     int           `json:"total"`
	Truncated bool          `json:"truncated,omitempty"`
	// TotalAtLeast says Total is a lower bound (more rows than were read).
	TotalAtLeast bool   `json:"total_at_least,omitempty"`
	Note         string `json:"note,omitempty"`
}

func listOf(items []store.Item, total int, atLeast bool, hint string) itemList {
	out := itemList{Items: make([]itemSummary, 0, min(len(items), maxListItems)), Total: total, TotalAtLeast: atLeast}
	for i, it := range items {
		if i == maxListItems {
			out.Truncated = true
			break
		}
		out.Items = append(out.Items, summarize(it))
	}
	out.Count = len(out.Items)
	if out.Truncated {
		out.Note = fmt.Sprintf("showing the first %d of %s, in key order; %s", out.Count, totalText(total, atLeast), hint)
	}
	return out
}

func totalText(total int, atLeast bool) string {
	if atLeast {
		return fmt.Sprintf("more than %d", total-1)
	}
	return fmt.Sprint(total)
}

func listItemsTool() Tool {
	type input struct {
		Kind      string `json:"kind"`
		State     string `json:"state"`
		Epic      string `json:"epic"`
		Milestone string `json:"milestone"`
	}
	return Tool{
		Definition: Definition{
			Name: "list_items",
			Description: "List the current project's tracker items (milestones, epics, tickets) in key order, " +
				"optionally filtered by kind, state, epic key or milestone key (filters combine with AND). " +
				"Returns {items: [{key, kind, title, state, type, epic, milestone, version}], count, total, truncated}. " +
				fmt.Sprintf("At most %d items are returned; when truncated is true, narrow the filters. ", maxListItems) +
				"Use get_item for an item's description, acceptance criteria and dependencies.",
			InputSchema: mustSchema(object(schema{
				"kind":      enum("Only items of this kind.", itemKinds...),
				"state":     enum("Only items in this state. Tickets: backlog, ready, in_progress, waiting_for_answer, paused, done, cancelled; milestones and epics: open, done, cancelled.", itemStates...),
				"epic":      pattern("Only tickets of this epic (an item key such as WEB-4).", anyCaseKey),
				"milestone": pattern("Only tickets and epics of this milestone (an item key such as WEB-2).", anyCaseKey),
			})),
		},
		Permission: store.PermTrackerRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			f := store.ItemFilter{Kind: in.Kind, State: in.State, Epic: normalizeKey(in.Epic),
				Milestone: normalizeKey(in.Milestone), Limit: itemFetchCap + 1}
			items, err := env.DB.ListItems(ctx, env.Caller, env.Project.Key, f)
			if err != nil {
				return nil, err
			}
			return listOf(items, len(items), len(items) > itemFetchCap, "narrow with kind, state, epic or milestone"), nil
		}),
	}
}

// itemDetail is one item in full, with its dependencies.
type itemDetail struct {
	Key                  string        `json:"key"`
	Project              string        `json:"project"`
	Kind                 string        `json:"kind"`
	Title                string        `json:"title"`
	State                string        `json:"state"`
	Type                 string        `json:"type,omitempty"`
	Epic                 string        `json:"epic,omitempty"`
	Milestone            string        `json:"milestone,omitempty"`
	Description          string        `json:"description"`
	DescriptionTruncated bool          `json:"description_truncated,omitempty"`
	DescriptionChars     int           `json:"description_chars,omitempty"`
	AcceptanceCriteria   []string      `json:"acceptance_criteria,omitempty"`
	Policy               *store.Policy `json:"policy,omitempty"`
	Version              int64         `json:"version"`
	CreatedBy            string        `json:"created_by"`
	CreatedAt            time.Time     `json:"created_at"`
	UpdatedAt            time.Time     `json:"updated_at"`
	Blocks               []string      `json:"blocks,omitempty"`
	BlockedBy            []blocker     `json:"blocked_by,omitempty"`
	Relates              []string      `json:"relates,omitempty"`
	DependenciesCut      bool          `json:"dependencies_truncated,omitempty"`
	Note                 string        `json:"note,omitempty"`
}

type blocker struct {
	Key   string `json:"key"`
	State string `json:"state,omitempty"`
}

func getItemTool() Tool {
	type input struct {
		Key string `json:"key"`
	}
	return Tool{
		Definition: Definition{
			Name: "get_item",
			Description: "Read one tracker item by key (e.g. WEB-12): kind, title, state, type, epic, milestone, " +
				"description, acceptance criteria, policy (read-only for you), version, and its dependencies " +
				"(blocks: items waiting on it; blocked_by: items it waits on, with their states; relates). " +
				fmt.Sprintf("Descriptions longer than %d characters are cut, with a note. ", maxBodyChars) +
				"Send the version you read with update_item operations in propose_changeset.",
			InputSchema: mustSchema(object(schema{
				"key": pattern("The item key, such as WEB-12.", anyCaseKey),
			}, "key")),
		},
		Permission: store.PermTrackerRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			key := normalizeKey(in.Key)
			it, err := env.DB.GetItem(ctx, env.Caller, key)
			if err != nil {
				return nil, namedNotFound(err, "item %s not found", key)
			}
			// The transcript is readable by everyone who reads this project:
			// it must hold nothing of the organization's other projects.
			if it.Project != env.Project.Key {
				return nil, store.Errorf(store.CodeNotFound, "item %s not found in project %s", key, env.Project.Key)
			}
			deps, err := env.DB.ListDependencies(ctx, env.Caller, key)
			if err != nil {
				return nil, namedNotFound(err, "item %s not found", key)
			}
			out := itemDetail{Key: it.Key, Project: it.Project, Kind: it.Kind, Title: it.Title, State: it.State,
				Type: it.Type, Epic: it.Epic, Milestone: it.Milestone, AcceptanceCriteria: it.AcceptanceCriteria,
				Policy: it.Policy, Version: it.Version, CreatedBy: it.CreatedBy, CreatedAt: it.CreatedAt,
				UpdatedAt: it.UpdatedAt}
			var cut bool
			out.Description, out.DescriptionChars, cut = clip(it.Description, maxBodyChars)
			if cut {
				out.DescriptionTruncated = true
				out.Note = cutNote("description", maxBodyChars, out.DescriptionChars)
			} else {
				out.DescriptionChars = 0
			}
			if len(deps) > maxDependencies {
				deps, out.DependenciesCut = deps[:maxDependencies], true
			}
			for _, d := range deps {
				switch {
				case d.Type == store.DependencyRelates && d.From == it.Key:
					out.Relates = append(out.Relates, d.To)
				case d.Type == store.DependencyRelates:
					out.Relates = append(out.Relates, d.From)
				case d.From == it.Key:
					out.Blocks = append(out.Blocks, d.To)
				default:
					b := blocker{Key: d.From}
					if bi, err := env.DB.GetItem(ctx, env.Caller, d.From); err == nil {
						b.State = bi.State
					}
					out.BlockedBy = append(out.BlockedBy, b)
				}
			}
			return out, nil
		}),
	}
}

// namedNotFound replaces a bare not_found (e.g. an organization the human
// cannot see) with a message naming what was sought.
func namedNotFound(err error, format string, args ...any) error {
	if store.IsCode(err, store.CodeNotFound) {
		return store.Errorf(store.CodeNotFound, format, args...)
	}
	return err
}

func listRunnableTool() Tool {
	type input struct{}
	return Tool{
		Definition: Definition{
			Name: "list_runnable",
			Description: "List the current project's runnable tickets: tickets in state ready whose blockers are " +
				"all done or cancelled, in key order. Returns {items: [{key, kind, title, state, type, epic, milestone, version}], " +
				fmt.Sprintf("count, total, truncated}; at most %d items.", maxListItems),
			InputSchema: mustSchema(object(schema{})),
		},
		Permission: store.PermTrackerRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			items, err := env.DB.Runnable(ctx, env.Caller, env.Project.Key)
			if err != nil {
				return nil, err
			}
			return listOf(items, len(items), false, "use list_items with filters to see specific ones"), nil
		}),
	}
}

// searchHit is one search_project result: an item (key) or a skill (name).
type searchHit struct {
	Kind     string `json:"kind"`
	Key      string `json:"key,omitempty"`
	ItemKind string `json:"item_kind,omitempty"`
	State    string `json:"state,omitempty"`
	Name     string `json:"name,omitempty"`
	Scope    string `json:"scope,omitempty"`
	Title    string `json:"title,omitempty"`
	Snippet  string `json:"snippet,omitempty"`
}

func searchProjectTool() Tool {
	type input struct {
		Query string `json:"query"`
		Kind  string `json:"kind"`
	}
	return Tool{
		Definition: Definition{
			Name: "search_project",
			Description: "Search the current project's tracker items and the skills that apply to it, by words, " +
				"phrases or an item key (full-text and fuzzy matching, and by meaning when semantic search is " +
				"configured), best match first. kind limits it to items or skills; without it both are searched " +
				"(those the human may read). " +
				"Returns {results: [{kind: item, key, item_kind, state, title, snippet} | {kind: skill, name, scope, snippet}], count}; " +
				fmt.Sprintf("at most %d results. Use get_item or read_skill for the full text.", maxSearchResults),
			InputSchema: mustSchema(object(schema{
				"query": str("What to look for: words, a phrase in quotes, or an item key.", 1, maxSearchQuery),
				"kind":  enum("Search only items or only skills.", store.SearchItems, store.SearchSkills),
			}, "query")),
		},
		// tracker.read to run at all (every role that reads the tracker
		// reads skills too); the store checks tracker.read for items and
		// skill.read for skills on each kind it searches.
		Permission: store.PermTrackerRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			if strings.TrimSpace(in.Query) == "" {
				return nil, store.Errorf(store.CodeInvalid, "query: must not be blank")
			}
			hits, err := env.DB.Search(ctx, env.Caller, store.SearchQuery{Q: in.Query, Kind: in.Kind,
				Project: env.Project.Key, Limit: maxSearchResults, Embedders: env.embedders()})
			if err != nil {
				return nil, err
			}
			out := struct {
				Results []searchHit `json:"results"`
				Count   int         `json:"count"`
			}{Results: make([]searchHit, 0, len(hits))}
			for _, h := range hits {
				r := searchHit{Kind: h.Kind, Title: h.Title, Snippet: short(h.Snippet, 400)}
				if h.Kind == store.SearchItems {
					r.Key, r.ItemKind, r.State = h.Key, h.Type, h.State
				} else {
					r.Name, r.Scope, r.Title = h.Name, h.Scope, ""
				}
				out.Results = append(out.Results, r)
			}
			out.Count = len(out.Results)
			return out, nil
		}),
	}
}
