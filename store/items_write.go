package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// trackerTx writes tracker records of one project inside one transaction,
// appending each write's events to the same transaction. REST, the planner's
// tools and changesets all write through it, so one rule set holds.
type trackerTx struct {
	tx      pgx.Tx
	actor   Actor
	project Project
	// changeset is recorded in event payloads of writes made by an apply.
	changeset string
}

func (w *trackerTx) event(ctx context.Context, typ, entityType, entityID, entityKey string, payload map[string]any) error {
	if w.changeset != "" {
		payload["changeset"] = w.changeset
	}
	_, err := AppendEvent(ctx, w.tx, Event{OrganizationID: w.project.OrganizationID, ProjectID: w.project.ID,
		Type: typ, EntityType: entityType, EntityID: entityID, EntityKey: entityKey, Actor: w.actor,
		Payload: MustJSON(payload)})
	return err
}

// itemWriteColumns are what an update of an item returns, which scanWrite
// reads back into the item.
const itemWriteColumns = `version, updated_at`

func (it *Item) scanWrite(row pgx.Row) error { return row.Scan(&it.Version, &it.UpdatedAt) }

// member resolves the key of an item of this project that field refers to,
// which must be of kind; it returns the item's id.
func (w *trackerTx) member(ctx context.Context, field, key, kind string) (string, error) {
	var id, got string
	err := w.tx.QueryRow(ctx, `SELECT id, kind FROM items WHERE project_id = $1 AND key = $2`,
		w.project.ID, key).Scan(&id, &got)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", Errorf(CodeInvalid, "%s: no item %s in project %s", field, key, w.project.Key)
	}
	if err != nil {
		return "", err
	}
	if got != kind {
		return "", Errorf(CodeInvalid, "%s: %s is a %s, not a %s", field, key, got, kind)
	}
	return id, nil
}

// createItem validates in, takes the next number of the project's key
// sequence and inserts the item. The sequence row stays locked until the
// transaction ends, so keys neither repeat nor skip.
func (w *trackerTx) createItem(ctx context.Context, in NewItem) (Item, error) {
	if err := checkNewItem(in); err != nil {
		return Item{}, err
	}
	it := Item{Project: w.project.Key, ProjectID: w.project.ID, OrganizationID: w.project.OrganizationID,
		Kind: in.Kind, Title: in.Title, Description: in.Description, State: StateOpen,
		AcceptanceCriteria: []string{}, Epic: in.Epic, Milestone: in.Milestone, Version: 1,
		CreatedBy: w.actor.Subject}
	if in.Kind == KindTicket {
		it.State, it.Type, it.Policy = StateBacklog, "feature", &Policy{ReviewMode: "agent", MergeMode: "auto"}
		if in.Type != "" {
			it.Type = in.Type
		}
		if in.AcceptanceCriteria != nil {
			it.AcceptanceCriteria = slices.Clone(in.AcceptanceCriteria)
		}
		if in.Policy != nil && in.Policy.ReviewMode != "" {
			it.Policy.ReviewMode = in.Policy.ReviewMode
		}
		if in.Policy != nil && in.Policy.MergeMode != "" {
			it.Policy.MergeMode = in.Policy.MergeMode
		}
	}
	var err error
	if in.Epic != "" {
		if it.EpicID, err = w.member(ctx, "epic", in.Epic, KindEpic); err != nil {
			return Item{}, err
		}
	}
	if in.Milestone != "" {
		if it.MilestoneID, err = w.member(ctx, "milestone", in.Milestone, KindMilestone); err != nil {
			return Item{}, err
		}
	}
	err = w.tx.QueryRow(ctx, `
		UPDATE projects SET next_item_number = next_item_number + 1 WHERE id = $1
		RETURNING next_item_number - 1`, w.project.ID).Scan(&it.Number)
	if err != nil {
		return Item{}, fmt.Errorf("allocate key: %w", err)
	}
	it.Key = w.project.Key + "-" + strconv.FormatInt(it.Number, 10)
	review, merge := "", ""
	if it.Policy != nil {
		review, merge = it.Policy.ReviewMode, it.Policy.MergeMode
	}
	err = w.tx.QueryRow(ctx, `
		INSERT INTO items (project_id, number, key, kind, title, description, state, type, acceptance_criteria,
		                   review_mode, merge_mode, epic_id, milestone_id, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, ''), $9, NULLIF($10, ''), NULLIF($11, ''),
		        NULLIF($12, '')::uuid, NULLIF($13, '')::uuid, $14)
		RETURNING id, created_at, updated_at`,
		w.project.ID, it.Number, it.Key, it.Kind, it.Title, it.Description, it.State, it.Type,
		it.AcceptanceCriteria, review, merge, it.EpicID, it.MilestoneID, it.CreatedBy).
		Scan(&it.ID, &it.CreatedAt, &it.UpdatedAt)
	if err != nil {
		return Item{}, mapCheck(err, "item %s violates a tracker rule", it.Key)
	}
	payload := map[string]any{"key": it.Key, "kind": it.Kind, "title": it.Title, "state": it.State}
	if it.Epic != "" {
		payload["epic"] = it.Epic
	}
	if it.Milestone != "" {
		payload["milestone"] = it.Milestone
	}
	return it, w.event(ctx, "item.created", "item", it.ID, it.Key, payload)
}

// change records one field's old and new value in an item.updated payload.
type change struct {
	From any `json:"from"`
	To   any `json:"to"`
}

// updateItem applies p to it, whose row the transaction holds locked.
func (w *trackerTx) updateItem(ctx context.Context, it Item, p ItemPatch) (Item, error) {
	if err := checkPatch(it.Kind, p); err != nil {
		return Item{}, err
	}
	changes := map[string]change{}
	set := func(field string, dst *string, v *string) {
		if v != nil && *v != *dst {
			changes[field] = change{*dst, *v}
			*dst = *v
		}
	}
	set("title", &it.Title, p.Title)
	set("description", &it.Description, p.Description)
	set("type", &it.Type, p.Type)
	if p.AcceptanceCriteria != nil && !slices.Equal(*p.AcceptanceCriteria, it.AcceptanceCriteria) {
		next := slices.Clone(*p.AcceptanceCriteria)
		if next == nil {
			next = []string{}
		}
		changes["acceptance_criteria"] = change{it.AcceptanceCriteria, next}
		it.AcceptanceCriteria = next
	}
	if p.Policy != nil {
		old := *it.Policy
		next := old
		if p.Policy.ReviewMode != "" {
			next.ReviewMode = p.Policy.ReviewMode
		}
		if p.Policy.MergeMode != "" {
			next.MergeMode = p.Policy.MergeMode
		}
		if next != old {
			changes["policy"] = change{old, next}
			it.Policy = &next
		}
	}
	for _, ref := range []struct {
		field, kind string
		key, id     *string
		v           *string
	}{
		{"epic", KindEpic, &it.Epic, &it.EpicID, p.Epic},
		{"milestone", KindMilestone, &it.Milestone, &it.MilestoneID, p.Milestone},
	} {
		if ref.v == nil || *ref.v == *ref.key {
			continue
		}
		id := ""
		if *ref.v != "" {
			var err error
			if id, err = w.member(ctx, ref.field, *ref.v, ref.kind); err != nil {
				return Item{}, err
			}
		}
		changes[ref.field] = change{nullString(*ref.key), nullString(*ref.v)}
		*ref.key, *ref.id = *ref.v, id
	}
	review, merge := "", ""
	if it.Policy != nil {
		review, merge = it.Policy.ReviewMode, it.Policy.MergeMode
	}
	err := it.scanWrite(w.tx.QueryRow(ctx, `
		UPDATE items SET title = $2, description = $3, type = NULLIF($4, ''), acceptance_criteria = $5,
		       review_mode = NULLIF($6, ''), merge_mode = NULLIF($7, ''), epic_id = NULLIF($8, '')::uuid,
		       milestone_id = NULLIF($9, '')::uuid, version = version + 1, updated_at = now()
		WHERE id = $1 RETURNING `+itemWriteColumns,
		it.ID, it.Title, it.Description, it.Type, it.AcceptanceCriteria, review, merge, it.EpicID, it.MilestoneID))
	if err != nil {
		return Item{}, mapCheck(err, "item %s violates a tracker rule", it.Key)
	}
	return it, w.event(ctx, "item.updated", "item", it.ID, it.Key,
		map[string]any{"key": it.Key, "version": it.Version, "changes": changes})
}

// transition moves it, whose row the transaction holds locked, to state.
func (w *trackerTx) transition(ctx context.Context, it Item, state string) (Item, error) {
	if err := checkEnum("state", state, ItemStates(it.Kind)); err != nil {
		return Item{}, err
	}
	if !CanTransition(it.Kind, it.State, state) {
		return Item{}, transitionError(it.Kind, it.State, state)
	}
	from := it.State
	err := it.scanWrite(w.tx.QueryRow(ctx, `
		UPDATE items SET state = $2, version = version + 1, updated_at = now()
		WHERE id = $1 RETURNING `+itemWriteColumns, it.ID, state))
	if err != nil {
		return Item{}, err
	}
	it.State = state
	return it, w.event(ctx, "item.state_changed", "item", it.ID, it.Key,
		map[string]any{"key": it.Key, "from": from, "to": state, "version": it.Version})
}
