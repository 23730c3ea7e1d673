package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Knowledge kinds of SPEC §6.
const (
	KnowledgeDocument = "document"
	KnowledgeDecision = "decision"
	KnowledgeNote     = "note"
	KnowledgeDebt     = "debt"
)

// KnowledgeKinds lists every knowledge kind.
var KnowledgeKinds = []string{KnowledgeDocument, KnowledgeDecision, KnowledgeNote, KnowledgeDebt}

// Limits of SPEC §6 and the schema.
const (
	maxKnowledgeTitle    = 300
	maxKnowledgeBody     = 200000
	maxKnowledgeProjects = 100
	maxKnowledgeItems    = 200
)

// KnowledgeEntry is one entry of an organization's knowledge space. Projects
// and Items hold project and item keys.
type KnowledgeEntry struct {
	ID             string    `json:"id"`
	OrganizationID string    `json:"organization_id"`
	Kind           string    `json:"kind"`
	Title          string    `json:"title"`
	Body           string    `json:"body"`
	Projects       []string  `json:"projects"`
	Items          []string  `json:"items"`
	Version        int       `json:"version"`
	CreatedBy      string    `json:"created_by"`
	UpdatedBy      string    `json:"updated_by"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// KnowledgeVersion is one kept version of an entry; the current version is
// kept too. Lists leave Body empty.
type KnowledgeVersion struct {
	EntryID   string    `json:"entry_id"`
	Version   int       `json:"version"`
	Kind      string    `json:"kind"`
	Title     string    `json:"title"`
	Body      string    `json:"body,omitempty"`
	Projects  []string  `json:"projects"`
	Items     []string  `json:"items"`
	UpdatedBy string    `json:"updated_by"`
	CreatedAt time.Time `json:"created_at"`
}

// NewKnowledge is what CreateKnowledge needs.
type NewKnowledge struct {
	Kind     string   `json:"kind"`
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	Projects []string `json:"projects"`
	Items    []string `json:"items"`
	// Then, when set, runs in the transaction of the write, before commit.
	Then Then[KnowledgeEntry] `json:"-"`
}

// KnowledgeUpdate changes an entry read at Version; nil fields stay as they
// are. A stale Version is a conflict whose details carry the current one.
type KnowledgeUpdate struct {
	Version  int       `json:"version"`
	Kind     *string   `json:"kind"`
	Title    *string   `json:"title"`
	Body     *string   `json:"body"`
	Projects *[]string `json:"projects"`
	Items    *[]string `json:"items"`
	// Then, when set, runs in the transaction of the write, before commit.
	Then Then[KnowledgeEntry] `json:"-"`
}

// KnowledgeFilter narrows ListKnowledge; empty fields do not filter. Limit
// is 1-200, default 50.
type KnowledgeFilter struct {
	Kind    string
	Project string
	Item    string
	Limit   int
}

// knowledgeColumns are what scanKnowledge reads from knowledge_entries.
const knowledgeColumns = `id, organization_id, kind, title, body, projects, items, version,
	created_by, updated_by, created_at, updated_at`

func scanKnowledge(row pgx.Row) (KnowledgeEntry, error) {
	var k KnowledgeEntry
	err := row.Scan(&k.ID, &k.OrganizationID, &k.Kind, &k.Title, &k.Body, &k.Projects, &k.Items, &k.Version,
		&k.CreatedBy, &k.UpdatedBy, &k.CreatedAt, &k.UpdatedAt)
	return k, err
}

func validKnowledgeKind(kind string) error {
	if !slices.Contains(KnowledgeKinds, kind) {
		return Errorf(CodeInvalid, "kind: must be one of %s, got %q", strings.Join(KnowledgeKinds, ", "), kind)
	}
	return nil
}

func validateKnowledgeText(title, body *string) error {
	if title != nil {
		if strings.TrimSpace(*title) == "" {
			return Errorf(CodeInvalid, "title: must not be empty")
		}
		if n := utf8.RuneCountInString(*title); n > maxKnowledgeTitle {
			return Errorf(CodeInvalid, "title: at most %d characters, got %d", maxKnowledgeTitle, n)
		}
	}
	if body != nil {
		if n := utf8.RuneCountInString(*body); n > maxKnowledgeBody {
			return Errorf(CodeInvalid, "body: at most %d characters, got %d", maxKnowledgeBody, n)
		}
	}
	return nil
}

// knowledgeLinks checks that project and item keys exist in the
// organization and returns them deduplicated with the linked project ids.
// Keys of another organization are reported as unknown, and so are new
// links (keys not in had) to projects, or items of projects, that the
// caller cannot read: linking tells nothing of what another project holds.
// A nil caller checks existence only.
func knowledgeLinks(ctx context.Context, q Querier, caller *Caller, orgID string, projects, items, had []string) (pkeys, pids, ikeys []string, err error) {
	readable := func(key, pid string) bool {
		return caller == nil || slices.Contains(had, key) || caller.Principal.Can(PermTrackerRead, orgID, pid)
	}
	pkeys, ikeys = dedupe(projects), dedupe(items)
	if len(pkeys) > maxKnowledgeProjects {
		return nil, nil, nil, Errorf(CodeInvalid, "projects: at most %d", maxKnowledgeProjects)
	}
	if len(ikeys) > maxKnowledgeItems {
		return nil, nil, nil, Errorf(CodeInvalid, "items: at most %d", maxKnowledgeItems)
	}
	found := map[string]string{}
	rows, err := q.Query(ctx, `SELECT key, id::text FROM projects WHERE organization_id = $1 AND key = ANY($2)`, orgID, pkeys)
	if err != nil {
		return nil, nil, nil, err
	}
	var k, id string
	if _, err := pgx.ForEachRow(rows, []any{&k, &id}, func() error { found[k] = id; return nil }); err != nil {
		return nil, nil, nil, err
	}
	for _, key := range pkeys {
		if found[key] == "" || !readable(key, found[key]) {
			return nil, nil, nil, Errorf(CodeInvalid, "projects: unknown project %q in this organization", key)
		}
		pids = append(pids, found[key])
	}
	if len(ikeys) > 0 {
		known := map[string]string{} // item key: project id
		rows, err := q.Query(ctx, `SELECT i.key, i.project_id::text FROM items i JOIN projects p ON p.id = i.project_id
			WHERE p.organization_id = $1 AND i.key = ANY($2)`, orgID, ikeys)
		if err != nil {
			return nil, nil, nil, err
		}
		if _, err := pgx.ForEachRow(rows, []any{&k, &id}, func() error { known[k] = id; return nil }); err != nil {
			return nil, nil, nil, err
		}
		for _, key := range ikeys {
			if pid, ok := known[key]; !ok || !readable(key, pid) {
				return nil, nil, nil, Errorf(CodeInvalid, "items: unknown item %q in this organization", key)
			}
		}
	}
	return pkeys, pids, ikeys, nil
}

func dedupe(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		k = strings.ToUpper(strings.TrimSpace(k))
		if k != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// CreateKnowledge adds an entry to the organization's space (see
// authorizeKnowledge), version 1, and appends knowledge.created.
func (db *DB) CreateKnowledge(ctx context.Context, caller Caller, orgKey string, n NewKnowledge) (KnowledgeEntry, error) {
	fail := func(err error) (KnowledgeEntry, error) {
		return KnowledgeEntry{}, fmt.Errorf("store: create knowledge: %w", err)
	}
	org, err := db.knowledgeOrg(ctx, caller, orgKey)
	if err != nil {
		return fail(err)
	}
	if err := knowledgeWriteGate(caller, org.ID); err != nil {
		return fail(err)
	}
	if err := validKnowledgeKind(n.Kind); err != nil {
		return fail(err)
	}
	if err := validateKnowledgeText(&n.Title, &n.Body); err != nil {
		return fail(err)
	}
	pkeys, pids, ikeys, err := knowledgeLinks(ctx, db.pool, &caller, org.ID, n.Projects, n.Items, nil)
	if err != nil {
		return fail(err)
	}
	if err := authorizeKnowledge(caller, PermKnowledgeWrite, org.ID, pids); err != nil {
		return fail(err)
	}
	var k KnowledgeEntry
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		who := humanOf(caller)
		k, err = scanKnowledge(tx.QueryRow(ctx, `
			INSERT INTO knowledge_entries (organization_id, kind, title, body, projects, items, created_by, updated_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING `+knowledgeColumns,
			org.ID, n.Kind, n.Title, n.Body, pkeys, ikeys, who))
		if err != nil {
			return err
		}
		if err := insertKnowledgeVersion(ctx, tx, k); err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: org.ID, Type: "knowledge.created",
			EntityType: "knowledge_entry", EntityID: k.ID, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"kind": k.Kind, "title": k.Title, "projects": k.Projects, "items": k.Items, "version": 1})})
		if err != nil {
			return err
		}
		return n.Then.run(ctx, tx, k)
	})
	if err != nil {
		return fail(err)
	}
	return k, nil
}

func knowledgeByID(ctx context.Context, q Querier, orgID, id string, lock bool) (KnowledgeEntry, error) {
	if _, err := uuid.Parse(id); err != nil {
		return KnowledgeEntry{}, Errorf(CodeNotFound, "knowledge entry %q not found", id)
	}
	sql := `SELECT ` + knowledgeColumns + ` FROM knowledge_entries WHERE organization_id = $1 AND id = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	k, err := scanKnowledge(q.QueryRow(ctx, sql, orgID, id))
	return k, notFound(err, "knowledge entry %q", id)
}

// GetKnowledge returns one entry of the organization (knowledge.read).
func (db *DB) GetKnowledge(ctx context.Context, caller Caller, orgKey, id string) (KnowledgeEntry, error) {
	org, err := db.knowledgeOrg(ctx, caller, orgKey)
	if err != nil {
		return KnowledgeEntry{}, fmt.Errorf("store: get knowledge: %w", err)
	}
	k, err := knowledgeByID(ctx, db.pool, org.ID, id, false)
	if err != nil {
		return KnowledgeEntry{}, fmt.Errorf("store: get knowledge: %w", err)
	}
	return k, nil
}

// ListKnowledge lists the organization's entries, most recently updated
// first, filtered by kind, linked project key and linked item key
// (knowledge.read).
func (db *DB) ListKnowledge(ctx context.Context, caller Caller, orgKey string, f KnowledgeFilter) ([]KnowledgeEntry, error) {
	org, err := db.knowledgeOrg(ctx, caller, orgKey)
	if err != nil {
		return nil, fmt.Errorf("store: list knowledge: %w", err)
	}
	if f.Kind != "" {
		if err := validKnowledgeKind(f.Kind); err != nil {
			return nil, fmt.Errorf("store: list knowledge: %w", err)
		}
	}
	switch {
	case f.Limit == 0:
		f.Limit = 50
	case f.Limit < 1 || f.Limit > 200:
		return nil, fmt.Errorf("store: list knowledge: %w", Errorf(CodeInvalid, "limit: must be 1-200, got %d", f.Limit))
	}
	rows, err := db.pool.Query(ctx, `SELECT `+knowledgeColumns+` FROM knowledge_entries
		WHERE organization_id = $1 AND ($2 = '' OR kind = $2) AND ($3 = '' OR upper($3) = ANY(projects))
		  AND ($4 = '' OR upper($4) = ANY(items))
		ORDER BY updated_at DESC, id LIMIT $5`, org.ID, f.Kind, f.Project, f.Item, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("store: list knowledge: %w", err)
	}
	out, err := collect(rows, scanKnowledge)
	if err != nil {
		return nil, fmt.Errorf("store: list knowledge: %w", err)
	}
	return out, nil
}

// UpdateKnowledge changes an entry read at u.Version and keeps the previous
// version readable. A stale version is a conflict naming the current one
// (Details["current_version"]). Writing follows authorizeKnowledge over the
// entry's old and new project links.
func (db *DB) UpdateKnowledge(ctx context.Context, caller Caller, orgKey, id string, u KnowledgeUpdate) (KnowledgeEntry, error) {
	fail := func(err error) (KnowledgeEntry, error) {
		return KnowledgeEntry{}, fmt.Errorf("store: update knowledge: %w", err)
	}
	org, err := db.knowledgeOrg(ctx, caller, orgKey)
	if err != nil {
		return fail(err)
	}
	if err := knowledgeWriteGate(caller, org.ID); err != nil {
		return fail(err)
	}
	if u.Version < 1 || u.Version > math.MaxInt32 {
		return fail(Errorf(CodeInvalid, "version: required, the version you read (got %d)", u.Version))
	}
	if u.Kind == nil && u.Title == nil && u.Body == nil && u.Projects == nil && u.Items == nil {
		return fail(Errorf(CodeInvalid, "give at least one of kind, title, body, projects, items"))
	}
	if u.Kind != nil {
		if err := validKnowledgeKind(*u.Kind); err != nil {
			return fail(err)
		}
	}
	if err := validateKnowledgeText(u.Title, u.Body); err != nil {
		return fail(err)
	}
	var k KnowledgeEntry
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		if k, err = knowledgeByID(ctx, tx, org.ID, id, true); err != nil {
			return err
		}
		_, oldPIDs, _, err := knowledgeLinks(ctx, tx, nil, org.ID, k.Projects, nil, nil)
		if err != nil {
			oldPIDs = nil // a linked project was deleted: only organization writers may edit
		}
		if err := authorizeKnowledge(caller, PermKnowledgeWrite, org.ID, oldPIDs); err != nil {
			return err
		}
		if k.Version != u.Version {
			return &Error{Code: CodeConflict, Details: map[string]any{"current_version": k.Version}, Message: fmt.Sprintf(
				"knowledge entry %s is at version %d, not %d: read it again and retry", k.ID, k.Version, u.Version)}
		}
		had := append(slices.Clone(k.Projects), k.Items...)
		applyKnowledgeUpdate(&k, u)
		var pids []string
		if k.Projects, pids, k.Items, err = knowledgeLinks(ctx, tx, &caller, org.ID, k.Projects, k.Items, had); err != nil {
			return err
		}
		if err := authorizeKnowledge(caller, PermKnowledgeWrite, org.ID, pids); err != nil {
			return err
		}
		k.Version++
		k.UpdatedBy = humanOf(caller)
		if err := tx.QueryRow(ctx, `
			UPDATE knowledge_entries SET kind = $2, title = $3, body = $4, projects = $5, items = $6,
			       version = $7, updated_by = $8, updated_at = now()
			WHERE id = $1 RETURNING updated_at`, k.ID, k.Kind, k.Title, k.Body, k.Projects, k.Items,
			k.Version, k.UpdatedBy).Scan(&k.UpdatedAt); err != nil {
			return err
		}
		if err := insertKnowledgeVersion(ctx, tx, k); err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: org.ID, Type: "knowledge.updated",
			EntityType: "knowledge_entry", EntityID: k.ID, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"version": k.Version, "fields": updatedFields(u)})})
		if err != nil {
			return err
		}
		return u.Then.run(ctx, tx, k)
	})
	if err != nil {
		return fail(err)
	}
	return k, nil
}

func applyKnowledgeUpdate(k *KnowledgeEntry, u KnowledgeUpdate) {
	if u.Kind != nil {
		k.Kind = *u.Kind
	}
	if u.Title != nil {
		k.Title = *u.Title
	}
	if u.Body != nil {
		k.Body = *u.Body
	}
	if u.Projects != nil {
		k.Projects = *u.Projects
	}
	if u.Items != nil {
		k.Items = *u.Items
	}
}

func updatedFields(u KnowledgeUpdate) []string {
	var f []string
	for name, set := range map[string]bool{"kind": u.Kind != nil, "title": u.Title != nil, "body": u.Body != nil,
		"projects": u.Projects != nil, "items": u.Items != nil} {
		if set {
			f = append(f, name)
		}
	}
	slices.Sort(f)
	return f
}
