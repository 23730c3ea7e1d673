package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Item kinds of SPEC §3.
const (
	KindMilestone = "milestone"
	KindEpic      = "epic"
	KindTicket    = "ticket"
)

// Item is a milestone, epic or ticket of a project's tracker. Epic and
// Milestone are keys ("" when unset); Type and Policy are set on tickets only.
type Item struct {
	ID                 string    `json:"id"`
	Key                string    `json:"key"`
	Project            string    `json:"project"`
	Kind               string    `json:"kind"`
	Title              string    `json:"title"`
	Description        string    `json:"description"`
	State              string    `json:"state"`
	Type               string    `json:"type,omitempty"`
	AcceptanceCriteria []string  `json:"acceptance_criteria"`
	Policy             *Policy   `json:"policy,omitempty"`
	Epic               string    `json:"epic"`
	Milestone          string    `json:"milestone"`
	Version            int64     `json:"version"`
	CreatedBy          string    `json:"created_by"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`

	ProjectID      string `json:"-"`
	OrganizationID string `json:"-"`
	Number         int64  `json:"-"`
	EpicID         string `json:"-"`
	MilestoneID    string `json:"-"`
}

// MarshalJSON writes an unset epic or milestone as null.
func (it Item) MarshalJSON() ([]byte, error) {
	type plain Item
	if it.AcceptanceCriteria == nil {
		it.AcceptanceCriteria = []string{}
	}
	return json.Marshal(struct {
		plain
		Epic      *string `json:"epic"`
		Milestone *string `json:"milestone"`
	}{plain(it), nullString(it.Epic), nullString(it.Milestone)})
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Policy is how a ticket's work is reviewed and merged. In inputs an empty
// field means the default (on create) or unchanged (on update).
type Policy struct {
	ReviewMode string `json:"review_mode,omitempty"`
	MergeMode  string `json:"merge_mode,omitempty"`
}

// NewItem is what CreateItem and a changeset's create_item take. Epic and
// Milestone are keys of items of the same project.
type NewItem struct {
	Kind               string   `json:"kind"`
	Title              string   `json:"title"`
	Description        string   `json:"description,omitempty"`
	Type               string   `json:"type,omitempty"`
	AcceptanceCriteria []string `json:"acceptance_criteria,omitempty"`
	Policy             *Policy  `json:"policy,omitempty"`
	Epic               string   `json:"epic,omitempty"`
	Milestone          string   `json:"milestone,omitempty"`
}

// ItemPatch is a partial update: nil fields stay as they are; "" clears Epic
// or Milestone.
type ItemPatch struct {
	Title              *string   `json:"title,omitempty"`
	Description        *string   `json:"description,omitempty"`
	Type               *string   `json:"type,omitempty"`
	AcceptanceCriteria *[]string `json:"acceptance_criteria,omitempty"`
	Policy             *Policy   `json:"policy,omitempty"`
	Epic               *string   `json:"epic,omitempty"`
	Milestone          *string   `json:"milestone,omitempty"`
}

// Empty reports whether the patch changes nothing.
func (p ItemPatch) Empty() bool {
	return p.Title == nil && p.Description == nil && p.Type == nil && p.AcceptanceCriteria == nil &&
		p.Policy == nil && p.Epic == nil && p.Milestone == nil
}

// ItemFilter narrows ListItems; empty fields match everything. Epic and
// Milestone are keys. Limit 0 means MaxItemList.
type ItemFilter struct {
	Kind      string
	State     string
	Epic      string
	Milestone string
	Limit     int
}

// MaxItemList caps one list of items.
const MaxItemList = 1000

// itemSelect selects what scanItem reads.
const itemSelect = `
SELECT i.id, i.project_id, p.organization_id, p.key, i.number, i.key, i.kind, i.title, i.description,
       i.state, COALESCE(i.type, ''), i.acceptance_criteria, COALESCE(i.review_mode, ''),
       COALESCE(i.merge_mode, ''), COALESCE(i.epic_id::text, ''), COALESCE(e.key, ''),
       COALESCE(i.milestone_id::text, ''), COALESCE(m.key, ''), i.version, i.created_by,
       i.created_at, i.updated_at
FROM items i
JOIN projects p ON p.id = i.project_id
LEFT JOIN items e ON e.id = i.epic_id
LEFT JOIN items m ON m.id = i.milestone_id`

func scanItem(row pgx.Row) (Item, error) {
	var it Item
	var review, merge string
	err := row.Scan(&it.ID, &it.ProjectID, &it.OrganizationID, &it.Project, &it.Number, &it.Key, &it.Kind,
		&it.Title, &it.Description, &it.State, &it.Type, &it.AcceptanceCriteria, &review, &merge,
		&it.EpicID, &it.Epic, &it.MilestoneID, &it.Milestone, &it.Version, &it.CreatedBy,
		&it.CreatedAt, &it.UpdatedAt)
	if review != "" || merge != "" {
		it.Policy = &Policy{ReviewMode: review, MergeMode: merge}
	}
	return it, err
}

func collectItems(rows pgx.Rows) ([]Item, error) {
	items, err := collect(rows, scanItem)
	if items == nil {
		items = []Item{}
	}
	return items, err
}

// itemByKey loads an item by key; forUpdate locks its row in q's transaction
// (FOR NO KEY UPDATE, which foreign-key checks of other writers do not wait on).
func itemByKey(ctx context.Context, q Querier, key string, forUpdate bool) (Item, error) {
	sql := itemSelect + ` WHERE i.key = $1`
	if forUpdate {
		sql += ` FOR NO KEY UPDATE OF i`
	}
	it, err := scanItem(q.QueryRow(ctx, sql, key))
	if err != nil {
		return Item{}, notFound(err, "item %s", key)
	}
	return it, nil
}

// projectForCaller loads a project by key and checks perm on it.
func (db *DB) projectForCaller(ctx context.Context, caller Caller, projectKey string, perm Permission) (Project, error) {
	p, err := db.ProjectByKey(ctx, projectKey)
	if err != nil {
		return Project{}, err
	}
	if err := caller.Authorize(perm, p.OrganizationID, p.ID); err != nil {
		return Project{}, err
	}
	return p, nil
}

// CreateItem adds an item to the project, taking the next key of its
// sequence in the same transaction (tracker.write).
func (db *DB) CreateItem(ctx context.Context, caller Caller, projectKey string, in NewItem) (Item, error) {
	p, err := db.projectForCaller(ctx, caller, projectKey, PermTrackerWrite)
	if err != nil {
		return Item{}, fmt.Errorf("store: create item: %w", err)
	}
	var it Item
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		it, err = (&trackerTx{tx: tx, actor: caller.Actor, project: p}).createItem(ctx, in)
		return err
	})
	if err != nil {
		return Item{}, fmt.Errorf("store: create item: %w", err)
	}
	return it, nil
}

// GetItem returns an item by key (tracker.read). An item of an organization
// the caller cannot see is not_found.
func (db *DB) GetItem(ctx context.Context, caller Caller, key string) (Item, error) {
	it, err := itemByKey(ctx, db.pool, key, false)
	if err == nil {
		err = caller.Authorize(PermTrackerRead, it.OrganizationID, it.ProjectID)
	}
	if err != nil {
		return Item{}, fmt.Errorf("store: get item: %w", err)
	}
	return it, nil
}

// ListItems lists a project's items in key order (tracker.read).
func (db *DB) ListItems(ctx context.Context, caller Caller, projectKey string, f ItemFilter) ([]Item, error) {
	p, err := db.projectForCaller(ctx, caller, projectKey, PermTrackerRead)
	if err != nil {
		return nil, fmt.Errorf("store: list items: %w", err)
	}
	if err := checkItemFilter(f); err != nil {
		return nil, fmt.Errorf("store: list items: %w", err)
	}
	sql := itemSelect + ` WHERE i.project_id = $1
		AND ($2 = '' OR i.kind = $2) AND ($3 = '' OR i.state = $3)
		AND ($4 = '' OR e.key = $4) AND ($5 = '' OR m.key = $5)
		ORDER BY i.number`
	args := []any{p.ID, f.Kind, f.State, f.Epic, f.Milestone}
	if f.Limit <= 0 || f.Limit > MaxItemList {
		f.Limit = MaxItemList
	}
	sql += ` LIMIT $6`
	args = append(args, f.Limit)
	rows, err := db.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list items: %w", err)
	}
	items, err := collectItems(rows)
	if err != nil {
		return nil, fmt.Errorf("store: list items: %w", err)
	}
	return items, nil
}

// UpdateItem applies patch to the item when version is its current version;
// otherwise it is a conflict whose details carry current_version
// (tracker.write).
func (db *DB) UpdateItem(ctx context.Context, caller Caller, key string, version int64, patch ItemPatch) (Item, error) {
	return db.writeVersioned(ctx, caller, key, version, "update item", func(w *trackerTx, it Item) (Item, error) {
		return w.updateItem(ctx, it, patch)
	})
}

// TransitionItem moves the item to state by the state machine of SPEC §3,
// when version is its current version (tracker.write).
func (db *DB) TransitionItem(ctx context.Context, caller Caller, key, state string, version int64) (Item, error) {
	return db.writeVersioned(ctx, caller, key, version, "transition item", func(w *trackerTx, it Item) (Item, error) {
		return w.transition(ctx, it, state)
	})
}

// writeVersioned locks the item, checks that version is current and runs
// write in one transaction.
func (db *DB) writeVersioned(ctx context.Context, caller Caller, key string, version int64, op string,
	write func(*trackerTx, Item) (Item, error)) (Item, error) {
	if version < 1 {
		return Item{}, fmt.Errorf("store: %s: %w", op, Errorf(CodeInvalid, "version: required (the version you read)"))
	}
	var out Item
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		w, it, err := lockItemForWrite(ctx, tx, caller, key)
		if err != nil {
			return err
		}
		if err := checkVersion(it, version); err != nil {
			return err
		}
		out, err = write(w, it)
		return err
	})
	if err != nil {
		return Item{}, fmt.Errorf("store: %s: %w", op, err)
	}
	return out, nil
}

// lockItemForWrite locks the item's row and checks tracker.write on it.
func lockItemForWrite(ctx context.Context, tx pgx.Tx, caller Caller, key string) (*trackerTx, Item, error) {
	it, err := itemByKey(ctx, tx, key, true)
	if err != nil {
		return nil, Item{}, err
	}
	if err := caller.Authorize(PermTrackerWrite, it.OrganizationID, it.ProjectID); err != nil {
		return nil, Item{}, err
	}
	p := Project{ID: it.ProjectID, OrganizationID: it.OrganizationID, Key: it.Project}
	return &trackerTx{tx: tx, actor: caller.Actor, project: p}, it, nil
}

func checkVersion(it Item, version int64) error {
	if it.Version == version {
		return nil
	}
	return &Error{Code: CodeConflict,
		Message: fmt.Sprintf("%s has changed: you sent version %d, the current version is %d", it.Key, version, it.Version),
		Details: map[string]any{"current_version": it.Version}}
}

// ItemHistory lists the events of an item, oldest first: its own events and
// those of dependencies that name it (tracker.read).
func (db *DB) ItemHistory(ctx context.Context, caller Caller, key string) ([]Event, error) {
	it, err := db.GetItem(ctx, caller, key)
	if err != nil {
		return nil, fmt.Errorf("store: item history: %w", err)
	}
	// The caller's own last write shows with its number.
	if err := db.numberQueuedEvents(ctx); err != nil {
		return nil, fmt.Errorf("store: item history: %w", err)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+eventColumns+` FROM events e
		WHERE project_id = $1 AND (
		      (entity_type = 'item' AND entity_id = $2) OR
		      (entity_type = 'dependency' AND (payload->>'from' = $3 OR payload->>'to' = $3)))
		ORDER BY seq LIMIT 1000`, it.ProjectID, it.ID, it.Key)
	if err != nil {
		return nil, fmt.Errorf("store: item history: %w", err)
	}
	events, err := collect(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("store: item history: %w", err)
	}
	if events == nil {
		events = []Event{}
	}
	return events, nil
}
