package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
)

// Output caps: lists are cut and say so; long texts are cut at a rune
// boundary with a note, so one tool result cannot flood the context.
const (
	maxListItems      = 50    // list_items, list_runnable
	itemFetchCap      = 500   // rows list_items reads to report a total
	maxChangesets     = 20    // list_changesets
	maxChangesLines   = 20    // operation lines shown per changeset
	maxSearchResults  = 20    // search_project
	maxSkills         = 100   // list_skills
	maxDependencies   = 100   // get_item
	maxBodyChars      = 20000 // skill and knowledge bodies, item descriptions
	maxSummaryChars   = 300   // changeset summaries in lists
	maxChangeTitleLen = 80    // titles inside changeset operation lines
)

// Planner returns the registry of the planner's twelve tools (SPEC §7).
// Every tool acts as the human of its Env through the store's domain
// functions; none can apply or reject a changeset or set a policy.
func Planner(log *slog.Logger) (*Registry, error) {
	return NewRegistry(log, plannerTools()...)
}

func plannerTools() []Tool {
	return []Tool{
		listItemsTool(),
		getItemTool(),
		listRunnableTool(),
		searchProjectTool(),
		listChangesetsTool(),
		proposeChangesetTool(),
		listSkillsTool(),
		readSkillTool(),
		searchKnowledgeTool(),
		getKnowledgeTool(),
		createKnowledgeTool(),
		updateKnowledgeTool(),
	}
}

// recorded is the step a writing tool gives its store write: the result
// the tool makes of what it wrote (out) is stored with env.Record in the
// write's own transaction. Without env.Record it does nothing.
func recorded[T any](env Env, out func(T) any) store.Then[T] {
	if env.Record == nil {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx, written T) error {
		b, err := json.Marshal(out(written))
		if err != nil {
			return err
		}
		return env.Record(ctx, tx, Result{Text: string(b)})
	}
}

// typed adapts a call on decoded input to a Tool.Call: the input is decoded
// strictly into T first.
func typed[T any](call func(ctx context.Context, env Env, in T) (any, error)) func(context.Context, Env, json.RawMessage) (any, error) {
	return func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
		var in T
		if err := decode(raw, &in); err != nil {
			return nil, err
		}
		return call(ctx, env, in)
	}
}

// decode reads validated input strictly into v and refuses text the
// database cannot hold (NUL characters), naming the field.
func decode(input json.RawMessage, v any) error {
	var raw any
	if err := json.Unmarshal(input, &raw); err != nil {
		return store.Errorf(store.CodeInvalid, "input: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if path, ok := findJSON(raw, "", func(s string, _ bool) bool { return strings.ContainsRune(s, 0) }); ok {
		return store.Errorf(store.CodeInvalid, "%s: must not contain NUL characters (\\u0000)", path)
	}
	return Decode(input, v)
}

// findJSON walks decoded JSON depth first, object keys in sorted order, and
// returns the path of the first object key or string value that match
// accepts (isKey tells which it is), e.g. operations[2].create.title.
func findJSON(v any, path string, match func(s string, isKey bool) bool) (string, bool) {
	switch x := v.(type) {
	case string:
		return path, match(x, false)
	case []any:
		for i, e := range x {
			if p, ok := findJSON(e, path+"["+strconv.Itoa(i)+"]", match); ok {
				return p, true
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := joinPath(path, k)
			if match(k, true) {
				return p, true
			}
			if p, ok := findJSON(x[k], p, match); ok {
				return p, true
			}
		}
	}
	return "", false
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// clip cuts s to at most n runes. It reports the rune count of s and
// whether s was cut.
func clip(s string, n int) (string, int, bool) {
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s, total, false
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i], total, true
}

// short cuts s to n runes with an ellipsis, for one-line summaries.
func short(s string, n int) string {
	c, _, cut := clip(s, n)
	if cut {
		return c + "…"
	}
	return c
}

func cutNote(field string, shown, total int) string {
	return fmt.Sprintf("%s cut at %d of %d characters; do not rewrite the %s from this partial copy", field, shown, total, field)
}

// normalizeKey upper-cases an item key (the model may write web-12).
func normalizeKey(k string) string { return strings.ToUpper(strings.TrimSpace(k)) }

// JSON Schema building blocks. Every object refuses unknown properties.

type schema = map[string]any

func object(props schema, required ...string) schema {
	s := schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func str(desc string, minLen, maxLen int) schema {
	s := schema{"type": "string", "description": desc}
	if minLen > 0 {
		s["minLength"] = minLen
	}
	if maxLen > 0 {
		s["maxLength"] = maxLen
	}
	return s
}

func pattern(desc, re string) schema {
	return schema{"type": "string", "description": desc, "pattern": re}
}

func enum(desc string, values ...string) schema {
	return schema{"type": "string", "description": desc, "enum": values}
}

func integer(desc string, minimum, maximum int) schema {
	return schema{"type": "integer", "description": desc, "minimum": minimum, "maximum": maximum}
}

func array(desc string, items schema, maxItems int) schema {
	return schema{"type": "array", "description": desc, "items": items, "maxItems": maxItems}
}

func mustSchema(s schema) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tools: schema: %v", err))
	}
	return b
}

// Patterns shared by the schemas.
const (
	keyPattern     = `[A-Za-z][A-Za-z0-9]{1,9}-[1-9][0-9]{0,17}`
	anyCaseKey     = `^` + keyPattern + `$`
	refPattern     = `\$[a-z0-9][a-z0-9_-]{0,63}`
	uuidPattern    = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	skillPattern   = `^[a-z0-9-]{2,64}$`
	maxVersion     = 1<<31 - 1
	maxSearchQuery = 500
)

var (
	itemStates = []string{store.StateBacklog, store.StateReady, store.StateInProgress, store.StateWaitingForAnswer,
		store.StatePaused, store.StateDone, store.StateCancelled, store.StateOpen}
	itemKinds   = []string{store.KindMilestone, store.KindEpic, store.KindTicket}
	ticketTypes = []string{"feature", "bug", "tech_debt", "docs", "spike"}
)
