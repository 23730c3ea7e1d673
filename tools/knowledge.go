package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/balletplanner/ballet/store"
)

// skillSummary is a skill in force in the project.
type skillSummary struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Scope       string `json:"scope,omitempty"`
	Version     int    `json:"version"`
	Pinned      bool   `json:"pinned,omitempty"`
	Problem     string `json:"problem,omitempty"`
}

func listSkillsTool() Tool {
	type input struct{}
	return Tool{
		Definition: Definition{
			Name: "list_skills",
			Description: "List the skills in force in the current project (for each name the most specific of " +
				"platform, organization and project, with the project's pins applied): playbooks and conventions " +
				"to follow. Returns {skills: [{name, description, scope, version, pinned, problem}], count, truncated}; " +
				fmt.Sprintf("at most %d. Read one with read_skill.", maxSkills),
			InputSchema: mustSchema(object(schema{})),
		},
		Permission: store.PermSkillRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			all, err := env.DB.ProjectSkills(ctx, env.Caller, env.Project.Key)
			if err != nil {
				return nil, err
			}
			out := struct {
				Skills    []skillSummary `json:"skills"`
				Count     int            `json:"count"`
				Truncated bool           `json:"truncated,omitempty"`
			}{Skills: []skillSummary{}}
			for i, s := range all {
				if i == maxSkills {
					out.Truncated = true
					break
				}
				out.Skills = append(out.Skills, skillSummary{Name: s.Name, Description: short(s.Description, 300),
					Scope: s.Scope, Version: s.ResolvedVersion, Pinned: s.Pinned != nil, Problem: s.Problem})
			}
			out.Count = len(out.Skills)
			return out, nil
		}),
	}
}

func readSkillTool() Tool {
	type input struct {
		Name string `json:"name"`
	}
	return Tool{
		Definition: Definition{
			Name: "read_skill",
			Description: "Read a skill's SKILL.md as it applies in the current project (the version in force). " +
				"Returns {name, scope, version, description, body, body_truncated, body_chars, problem}; " +
				fmt.Sprintf("bodies longer than %d characters are cut, with a note.", maxBodyChars),
			InputSchema: mustSchema(object(schema{
				"name": pattern("The skill name, as list_skills shows it (2-64 characters of a-z, 0-9, -).", skillPattern),
			}, "name")),
		},
		Permission: store.PermSkillRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			r, err := env.DB.ResolveSkill(ctx, env.Caller, env.Project.Key, in.Name)
			if err != nil {
				return nil, err
			}
			out := struct {
				Name          string `json:"name"`
				Scope         string `json:"scope"`
				Version       int    `json:"version"`
				Description   string `json:"description"`
				Body          string `json:"body"`
				BodyTruncated bool   `json:"body_truncated,omitempty"`
				BodyChars     int    `json:"body_chars,omitempty"`
				Problem       string `json:"problem,omitempty"`
				Note          string `json:"note,omitempty"`
			}{Name: r.Name, Scope: r.Scope, Version: r.ResolvedVersion, Description: r.Description, Problem: r.Problem}
			var cut bool
			var total int
			if out.Body, total, cut = clip(r.Body, maxBodyChars); cut {
				out.BodyTruncated, out.BodyChars = true, total
				out.Note = fmt.Sprintf("body cut at %d of %d characters", maxBodyChars, total)
			}
			return out, nil
		}),
	}
}

var knowledgeKindDesc = "document (reference material), decision (a decision and its reasons), note, or debt (known technical debt)."

func searchKnowledgeTool() Tool {
	type input struct {
		Query string `json:"query"`
		Kind  string `json:"kind"`
		Limit int    `json:"limit"`
	}
	return Tool{
		Definition: Definition{
			Name: "search_knowledge",
			Description: "Search the organization's knowledge base (documents, decisions, notes, debt; shared by " +
				"all its projects) by words, phrases or close spellings (and by meaning when semantic search is " +
				"configured), best match first. Returns {results: [{id, kind, title, projects, items, version, " +
				"updated_at, snippet, score}], count} without bodies; read one with get_knowledge. " +
				"limit 1-50, default 20.",
			InputSchema: mustSchema(object(schema{
				"query": str("What to look for.", 1, maxSearchQuery),
				"kind":  enum("Only entries of this kind: "+knowledgeKindDesc, store.KnowledgeKinds...),
				"limit": integer("How many results, 1-50 (default 20).", 1, 50),
			}, "query")),
		},
		Permission: store.PermKnowledgeRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			if strings.TrimSpace(in.Query) == "" {
				return nil, store.Errorf(store.CodeInvalid, "query: must not be blank")
			}
			hits, err := env.DB.SearchKnowledge(ctx, env.Caller, env.Project.OrganizationID,
				store.KnowledgeSearch{Q: in.Query, Kind: in.Kind, Limit: in.Limit, Embedders: env.embedders()})
			if err != nil {
				return nil, err
			}
			out := struct {
				Results []store.KnowledgeHit `json:"results"`
				Count   int                  `json:"count"`
			}{Results: make([]store.KnowledgeHit, 0, len(hits)), Count: len(hits)}
			for _, h := range hits {
				h.Projects, h.Items, h.Snippet = nonNil(h.Projects), nonNil(h.Items), short(h.Snippet, 400)
				out.Results = append(out.Results, h)
			}
			return out, nil
		}),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// knowledgeOut is the store's knowledge entry as the tools return it: its
// body cut at maxBodyChars with a note, or left out.
type knowledgeOut struct {
	store.KnowledgeEntry
	// Body, being less nested, replaces the entry's own in JSON.
	Body          *string `json:"body,omitempty"`
	BodyTruncated bool    `json:"body_truncated,omitempty"`
	BodyChars     int     `json:"body_chars,omitempty"`
	Note          string  `json:"note,omitempty"`
}

func knowledgeOf(k store.KnowledgeEntry, withBody bool) knowledgeOut {
	body := k.Body
	k.Body, k.Projects, k.Items = "", nonNil(k.Projects), nonNil(k.Items)
	out := knowledgeOut{KnowledgeEntry: k}
	if withBody {
		clipped, total, cut := clip(body, maxBodyChars)
		out.Body = &clipped
		if cut {
			out.BodyTruncated, out.BodyChars = true, total
			out.Note = cutNote("body", maxBodyChars, total)
		}
	}
	return out
}

func getKnowledgeTool() Tool {
	type input struct {
		ID string `json:"id"`
	}
	return Tool{
		Definition: Definition{
			Name: "get_knowledge",
			Description: "Read one knowledge entry by id (from search_knowledge): {id, organization_id, kind, title, " +
				"body (Markdown), projects, items, version, created_by, updated_by, created_at, updated_at}. " +
				fmt.Sprintf("Bodies longer than %d characters are cut (body_truncated, with a note): ", maxBodyChars) +
				"then do not replace the body from the partial copy. Send version with update_knowledge.",
			InputSchema: mustSchema(object(schema{
				"id": pattern("The entry id (a UUID).", uuidPattern),
			}, "id")),
		},
		Permission: store.PermKnowledgeRead,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			k, err := env.DB.GetKnowledge(ctx, env.Caller, env.Project.OrganizationID, in.ID)
			if err != nil {
				return nil, namedNotFound(err, "knowledge entry %q not found", in.ID)
			}
			return knowledgeOf(k, true), nil
		}),
	}
}

func itemKeys(desc string) schema {
	return array(desc, pattern("An item key such as WEB-12.", anyCaseKey), 200)
}

func createKnowledgeTool() Tool {
	type input struct {
		Kind  string   `json:"kind"`
		Title string   `json:"title"`
		Body  string   `json:"body"`
		Items []string `json:"items"`
	}
	return Tool{
		Definition: Definition{
			Name: "create_knowledge",
			Description: "Write a new entry into the organization's knowledge base, linked to the current project " +
				"and optionally to items. Use it to record decisions, findings and debt the human agreed on; the " +
				"human you act for is its author. Search first (search_knowledge) and update an existing entry " +
				"instead of duplicating it. Returns the entry without its body: {id, kind, title, projects, items, " +
				"version, created_by, ...}.",
			InputSchema: mustSchema(object(schema{
				"kind":  enum(knowledgeKindDesc, store.KnowledgeKinds...),
				"title": str("Title, at most 300 characters.", 1, 300),
				"body":  str("Markdown body, at most 200000 characters.", 0, 200000),
				"items": itemKeys("Item keys the entry is about (at most 200)."),
			}, "kind", "title", "body")),
		},
		Permission: store.PermKnowledgeWrite,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			out := func(k store.KnowledgeEntry) any { return knowledgeOf(k, false) }
			k, err := env.DB.CreateKnowledge(ctx, env.Caller, env.Project.OrganizationID, store.NewKnowledge{
				Kind: in.Kind, Title: in.Title, Body: in.Body, Projects: []string{env.Project.Key}, Items: in.Items,
				Then: recorded(env, out)})
			if err != nil {
				return nil, err
			}
			return out(k), nil
		}),
	}
}

func updateKnowledgeTool() Tool {
	type input struct {
		ID      string    `json:"id"`
		Version int       `json:"version"`
		Kind    *string   `json:"kind"`
		Title   *string   `json:"title"`
		Body    *string   `json:"body"`
		Items   *[]string `json:"items"`
	}
	return Tool{
		Definition: Definition{
			Name: "update_knowledge",
			Description: "Change a knowledge entry. Send the version you read (get_knowledge); if someone changed " +
				"it since, the call fails with a conflict naming the current version: read it again, merge, retry. " +
				"Given fields replace the old ones (body replaces the whole body; items replaces the item links); " +
				"omitted fields stay. The previous version stays readable. Returns the entry without its body.",
			InputSchema: mustSchema(object(schema{
				"id":      pattern("The entry id (a UUID).", uuidPattern),
				"version": integer("The version you read.", 1, maxVersion),
				"kind":    enum(knowledgeKindDesc, store.KnowledgeKinds...),
				"title":   str("New title, at most 300 characters.", 1, 300),
				"body":    str("New Markdown body (replaces the whole body), at most 200000 characters.", 0, 200000),
				"items":   itemKeys("New item links (replaces the list; at most 200)."),
			}, "id", "version")),
		},
		Permission: store.PermKnowledgeWrite,
		Call: typed(func(ctx context.Context, env Env, in input) (any, error) {
			if in.Kind == nil && in.Title == nil && in.Body == nil && in.Items == nil {
				return nil, store.Errorf(store.CodeInvalid, "give at least one of kind, title, body, items to change")
			}
			out := func(k store.KnowledgeEntry) any { return knowledgeOf(k, false) }
			k, err := env.DB.UpdateKnowledge(ctx, env.Caller, env.Project.OrganizationID, in.ID, store.KnowledgeUpdate{
				Version: in.Version, Kind: in.Kind, Title: in.Title, Body: in.Body, Items: in.Items,
				Then: recorded(env, out)})
			if err != nil {
				return nil, namedNotFound(err, "knowledge entry %q not found", in.ID)
			}
			return out(k), nil
		}),
	}
}
