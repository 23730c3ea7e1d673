package tools

import (
	"context"
	"encoding/json"
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
		Call: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			f := store.ItemFilter{Kind: in.Kind, State: in.State, Epic: normalizeKey(in.Epic),
				Milestone: normalizeKey(in.Milestone), Limit: itemFetchCap + 1}
			items, err := env.DB.ListItems(ctx, env.Caller, env.Project.Key, f)
			if err != nil {
				return nil, err
			}
			return listOf(items, len(items), len(items) > itemFetchCap, "narrow with kind, state, epic or milestone"), nil
		},
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
		Call: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			key := normalizeKey(in.Key)
			it, err := env.DB.GetItem(ctx, env.Caller, key)
			if err != nil {
				return nil, namedNotFound(err, "item %s not found", key)
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
		},
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
		Call: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			items, err := env.DB.Runnable(ctx, env.Caller, env.Project.Key)
			if err != nil {
				return nil, err
			}
			return listOf(items, len(items), false, "use list_items with filters to see specific ones"), nil
		},
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
				"phrases or an item key (full-text and fuzzy matching), best match first. kind limits it to items " +
				"or skills; without it both are searched (those the human may read). " +
				"Returns {results: [{kind: item, key, item_kind, state, title, snippet} | {kind: skill, name, scope, snippet}], count}; " +
				fmt.Sprintf("at most %d results. Use get_item or read_skill for the full text.", maxSearchResults),
			InputSchema: mustSchema(object(schema{
				"query": str("What to look for: words, a phrase in quotes, or an item key.", 1, maxSearchQuery),
				"kind":  enum("Search only items or only skills.", store.SearchItems, store.SearchSkills),
			}, "query")),
		},
		// tracker.read for items; skill.read for skills (the store checks
		// each kind it searches).
		Permission: store.PermTrackerRead,
		Call: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			if strings.TrimSpace(in.Query) == "" {
				return nil, store.Errorf(store.CodeInvalid, "query: must not be blank")
			}
			hits, err := env.DB.Search(ctx, env.Caller, store.SearchQuery{Q: in.Query, Kind: in.Kind,
				Project: env.Project.Key, Limit: maxSearchResults})
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
		},
	}
}

// changesetSummary is a changeset in a list.
type changesetSummary struct {
	ID         string     `json:"id"`
	Title      string     `json:"title"`
	Status     string     `json:"status"`
	Summary    string     `json:"summary,omitempty"`
	Operations int        `json:"operations"`
	Changes    []string   `json:"changes"`
	ProposedBy string     `json:"proposed_by"`
	ActingFor  string     `json:"acting_for,omitempty"`
	Session    string     `json:"session,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	DecidedBy  string     `json:"decided_by,omitempty"`
	DecidedAt  *time.Time `json:"decided_at,omitempty"`
	// Applied lists, for an applied changeset, the operations applied and
	// the item keys they created or updated.
	Applied []string `json:"applied,omitempty"`
}

// describeOperation renders one operation as a short line.
func describeOperation(i int, op store.Operation) string {
	switch {
	case op.Create != nil:
		ref := ""
		if op.Ref != "" {
			ref = " $" + op.Ref
		}
		return fmt.Sprintf("%d: create %s%s %q", i, op.Create.Kind, ref, short(op.Create.Title, maxChangeTitleLen))
	case op.Update != nil:
		var fields []string
		for _, f := range []struct {
			name string
			set  bool
		}{{"title", op.Update.Title != nil}, {"description", op.Update.Description != nil},
			{"type", op.Update.Type != nil}, {"acceptance_criteria", op.Update.AcceptanceCriteria != nil},
			{"policy", op.Update.Policy != nil}, {"epic", op.Update.Epic != nil}, {"milestone", op.Update.Milestone != nil}} {
			if f.set {
				fields = append(fields, f.name)
			}
		}
		v := ""
		if op.Update.Version > 0 {
			v = fmt.Sprintf(" (at version %d)", op.Update.Version)
		}
		return fmt.Sprintf("%d: update %s%s: %s", i, op.Update.Item, v, strings.Join(fields, ", "))
	case op.Dependency != nil:
		return fmt.Sprintf("%d: %s %s %s", i, op.Dependency.From, op.Dependency.Type, op.Dependency.To)
	}
	return fmt.Sprintf("%d: %s", i, op.Kind)
}

func listChangesetsTool() Tool {
	type input struct {
		Status string `json:"status"`
	}
	return Tool{
		Definition: Definition{
			Name: "list_changesets",
			Description: "List the current project's changesets, newest first, optionally of one status " +
				"(proposed: waiting for a human; applied; rejected). Check the proposed ones before proposing, " +
				"so you do not propose the same change twice. Returns {changesets: [{id, title, status, summary, " +
				"operations, changes (one line per operation), proposed_by, acting_for, created_at, decided_by, " +
				fmt.Sprintf("decided_at, applied}], count, total, truncated}; at most %d changesets, ", maxChangesets) +
				fmt.Sprintf("%d operation lines each.", maxChangesLines),
			InputSchema: mustSchema(object(schema{
				"status": enum("Only changesets of this status.", store.ChangesetProposed, store.ChangesetApplied, store.ChangesetRejected),
			})),
		},
		Permission: store.PermTrackerRead,
		Call: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			all, err := env.DB.ListChangesets(ctx, env.Caller, env.Project.Key, in.Status)
			if err != nil {
				return nil, err
			}
			out := struct {
				Changesets []changesetSummary `json:"changesets"`
				Count      int                `json:"count"`
				Total      int                `json:"total"`
				Truncated  bool               `json:"truncated,omitempty"`
			}{Changesets: []changesetSummary{}, Total: len(all)}
			for i, cs := range all {
				if i == maxChangesets {
					out.Truncated = true
					break
				}
				out.Changesets = append(out.Changesets, summarizeChangeset(cs))
			}
			out.Count = len(out.Changesets)
			return out, nil
		},
	}
}

func summarizeChangeset(cs store.Changeset) changesetSummary {
	s := changesetSummary{ID: cs.ID, Title: cs.Title, Status: cs.Status, Summary: short(cs.Summary, maxSummaryChars),
		Operations: len(cs.Operations), Changes: []string{}, ProposedBy: cs.ProposedBy.Subject,
		ActingFor: cs.ProposedBy.ActingFor, Session: cs.SessionID, CreatedAt: cs.CreatedAt,
		DecidedBy: cs.DecidedBy, DecidedAt: cs.DecidedAt}
	for i, op := range cs.Operations {
		if i == maxChangesLines {
			s.Changes = append(s.Changes, fmt.Sprintf("… and %d more", len(cs.Operations)-i))
			break
		}
		s.Changes = append(s.Changes, describeOperation(i, op))
	}
	for _, r := range cs.Results {
		if r.Status != store.ResultApplied {
			continue
		}
		switch {
		case r.Item != "":
			s.Applied = append(s.Applied, fmt.Sprintf("%d: %s", r.Operation, r.Item))
		default:
			s.Applied = append(s.Applied, fmt.Sprintf("%d: %s", r.Operation, r.Kind))
		}
	}
	return s
}

func proposeChangesetTool() Tool {
	type input struct {
		Title      string            `json:"title"`
		Summary    string            `json:"summary"`
		Operations []store.Operation `json:"operations"`
	}
	return Tool{
		Definition: Definition{
			Name: "propose_changeset",
			Description: "Propose a set of tracker changes to the current project for a human to review. This is " +
				"the only way you change the plan: nothing changes until a human applies it (all or some " +
				"operations) or rejects it; you cannot apply or reject. Operations (1-200, run in order): " +
				"create_item {kind: create_item, ref, create: {kind, title, description, type, acceptance_criteria, epic, milestone}}; " +
				"update_item {kind: update_item, update: {item, version, title, description, type, acceptance_criteria, epic, milestone}} " +
				"(at least one field; \"\" clears epic or milestone; send the version you read with get_item); " +
				"add_dependency {kind: add_dependency, dependency: {from, to, type: blocks|relates}} (from blocks to: to waits until from is done or cancelled). " +
				"An item reference is an existing key (WEB-12) or $ref naming an earlier create_item's ref. " +
				"The whole changeset is validated as if applied (keys, kinds, one update per item, no duplicate or " +
				"cyclic dependency); an error names the operation's index. Never set policy (review or merge mode): " +
				"a human decides it, and any policy is refused. Returns {id, status, title, operations, changes, note}.",
			InputSchema: mustSchema(proposalSchema()),
		},
		Permission: store.PermTrackerWrite,
		Call: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var doc any
			if err := json.Unmarshal(raw, &doc); err != nil {
				return nil, store.Errorf(store.CodeInvalid, "input: %v", err)
			}
			if path, found := findKey(doc, "", "policy"); found {
				return nil, store.Errorf(store.CodeInvalid,
					"%s: the planner may not set a policy (review or merge mode); a human sets it. Remove it and propose again", path)
			}
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			normalizeOperations(in.Operations)
			p := store.Proposal{Title: in.Title, Summary: in.Summary, Operations: in.Operations}
			if err := p.CheckNoPolicy(); err != nil {
				return nil, err
			}
			cs, err := env.DB.ProposeChangeset(ctx, env.Caller, env.Project.Key, p)
			if err != nil {
				return nil, err
			}
			s := summarizeChangeset(cs)
			return struct {
				ID         string   `json:"id"`
				Status     string   `json:"status"`
				Title      string   `json:"title"`
				Operations int      `json:"operations"`
				Changes    []string `json:"changes"`
				Note       string   `json:"note"`
			}{cs.ID, cs.Status, cs.Title, len(cs.Operations), s.Changes,
				"Proposed. A human reviews it and applies all or some operations, or rejects it; " +
					"item keys are assigned when it is applied. Tell the human what you proposed and why."}, nil
		},
	}
}

// normalizeOperations upper-cases the item keys of ops (the model may
// write web-12); $refs stay as they are.
func normalizeOperations(ops []store.Operation) {
	norm := func(s *string) {
		if s != nil && !strings.HasPrefix(*s, "$") {
			*s = normalizeKey(*s)
		}
	}
	for i := range ops {
		switch op := &ops[i]; {
		case op.Create != nil:
			norm(&op.Create.Epic)
			norm(&op.Create.Milestone)
		case op.Update != nil:
			norm(&op.Update.Item)
			norm(op.Update.Epic)
			norm(op.Update.Milestone)
		case op.Dependency != nil:
			norm(&op.Dependency.From)
			norm(&op.Dependency.To)
		}
	}
}

// proposalSchema mirrors SPEC §4; no object in it admits a policy.
func proposalSchema() schema {
	itemRef := pattern("An existing item key (WEB-12) or $ref of an earlier create_item in this changeset.",
		`^(`+keyPattern+`|`+refPattern+`)$`)
	clearableRef := func(desc string) schema {
		return pattern(desc+" An item key or $ref; \"\" clears it.", `^(|`+keyPattern+`|`+refPattern+`)$`)
	}
	criteria := array("Acceptance criteria of a ticket, one testable statement each (replaces the list on update).",
		str("One criterion.", 1, store.MaxAcceptanceCriterionLen), store.MaxAcceptanceCriteria)
	typ := enum("Ticket type (tickets only; default feature).", ticketTypes...)
	create := object(schema{
		"kind":                enum("What to create.", itemKinds...),
		"title":               str("Title.", 1, store.MaxTitleLen),
		"description":         str("Markdown description.", 0, store.MaxDescriptionLen),
		"type":                typ,
		"acceptance_criteria": criteria,
		"epic":                pattern("Epic of a ticket: an epic's key or $ref.", `^(`+keyPattern+`|`+refPattern+`)$`),
		"milestone":           pattern("Milestone of a ticket or epic: a milestone's key or $ref.", `^(`+keyPattern+`|`+refPattern+`)$`),
	}, "kind", "title")
	update := object(schema{
		"item":                itemRef,
		"version":             integer("The item version you read (get_item); the human's apply refuses if the item changed since.", 1, maxVersion),
		"title":               str("New title.", 1, store.MaxTitleLen),
		"description":         str("New Markdown description (replaces the old one).", 0, store.MaxDescriptionLen),
		"type":                typ,
		"acceptance_criteria": criteria,
		"epic":                clearableRef("New epic of a ticket."),
		"milestone":           clearableRef("New milestone of a ticket or epic."),
	}, "item")
	update["description"] = "The item and at least one field to change."
	update["minProperties"] = 2
	dependency := object(schema{
		"from": itemRef,
		"to":   itemRef,
		"type": enum("blocks: to waits until from is done or cancelled; relates: informational.",
			store.DependencyBlocks, store.DependencyRelates),
	}, "from", "to", "type")
	only := func(kind, payload string, extra ...string) schema {
		allowed := schema{"kind": true, payload: true}
		for _, e := range extra {
			allowed[e] = true
		}
		return schema{
			"if":   schema{"properties": schema{"kind": schema{"const": kind}}, "required": []string{"kind"}},
			"then": schema{"required": []string{payload}, "properties": allowed, "additionalProperties": false},
		}
	}
	op := object(schema{
		"kind":       enum("The operation; it carries exactly the matching payload.", store.OpCreateItem, store.OpUpdateItem, store.OpAddDependency),
		"ref":        pattern("create_item only: a name for the new item that later operations use as $ref.", `^[a-z0-9][a-z0-9_-]{0,63}$`),
		"create":     create,
		"update":     update,
		"dependency": dependency,
	}, "kind")
	op["allOf"] = []schema{
		only(store.OpCreateItem, "create", "ref"),
		only(store.OpUpdateItem, "update"),
		only(store.OpAddDependency, "dependency"),
	}
	ops := array("The operations, applied in order.", op, store.MaxChangesetOperations)
	ops["minItems"] = 1
	return object(schema{
		"title":      str("A short title for the human reviewing it.", 1, store.MaxChangesetTitleLen),
		"summary":    str("Why: the reasoning a reviewer needs (Markdown).", 0, store.MaxChangesetSummaryLen),
		"operations": ops,
	}, "title", "operations")
}
