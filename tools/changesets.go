package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/balletplanner/ballet/store"
)

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
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			all, err := env.DB.ListChangesets(ctx, env.Caller, env.Project.Key, in.Status)
			if err != nil {
				return nil, err
			}
			out := struct {
				Changesets []changesetSummary `json:"changesets"`
				Count      int                `json:"count"`
				Total      int                `json:"total"`
				Truncated  bool               `json:"truncated,omitempty"`
				// AtLeast says the store's list stopped at its cap.
				AtLeast bool `json:"total_is_lower_bound,omitempty"`
			}{Changesets: []changesetSummary{}, Total: len(all), AtLeast: len(all) >= store.MaxChangesetList}
			for i, cs := range all {
				if i == maxChangesets {
					out.Truncated = true
					break
				}
				out.Changesets = append(out.Changesets, summarizeChangeset(cs))
			}
			out.Count = len(out.Changesets)
			return out, nil
		}),
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
			if path, found := findJSON(doc, "", func(s string, isKey bool) bool { return isKey && s == "policy" }); found {
				return nil, store.Errorf(store.CodeInvalid,
					"%s: the planner may not set a policy (review or merge mode); a human sets it. Remove it and propose again", path)
			}
			var in input
			if err := decode(raw, &in); err != nil {
				return nil, err
			}
			normalizeOperations(in.Operations)
			p := store.Proposal{Title: in.Title, Summary: in.Summary, Operations: in.Operations,
				Then: recorded(env, proposed)}
			if err := p.CheckNoPolicy(); err != nil {
				return nil, err
			}
			cs, err := env.DB.ProposeChangeset(ctx, env.Caller, env.Project.Key, p)
			if err != nil {
				return nil, err
			}
			return proposed(cs), nil
		},
	}
}

// proposed is propose_changeset's result.
func proposed(cs store.Changeset) any {
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
			"item keys are assigned when it is applied. Tell the human what you proposed and why."}
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
