package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ApplyChangeset applies the chosen operations (0-based indexes) of a
// proposed changeset atomically, in their order, and marks it applied
// (tracker.write, a human only). Every $ref a chosen operation uses must be
// chosen too. Each operation is validated again against the tracker as it
// is now; an update_item whose item changed since the proposal is a conflict
// naming the operation. The changeset row is locked first, so of two
// concurrent applies exactly one succeeds and the other gets a conflict.
func (db *DB) ApplyChangeset(ctx context.Context, caller Caller, id string, chosen []int) (Changeset, error) {
	var cs Changeset
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		if cs, err = lockForDecision(ctx, tx, caller, id, "apply"); err != nil {
			return err
		}
		order, err := checkChosen(cs.Operations, chosen)
		if err != nil {
			return err
		}
		proj := Project{ID: cs.ProjectID, OrganizationID: cs.OrganizationID, Key: cs.Project}
		run := &changesetRun{w: &trackerTx{tx: tx, actor: caller.Actor, project: proj, changeset: cs.ID},
			refs: map[string]string{}}
		if err := run.w.lockDependencies(ctx); err != nil {
			return err
		}
		results := make([]OperationResult, len(cs.Operations))
		for i, op := range cs.Operations {
			results[i] = OperationResult{Operation: i, Kind: op.Kind, Status: ResultSkipped, Ref: op.Ref}
		}
		var keys []string
		for _, i := range order {
			res, err := run.run(ctx, i, &cs.Operations[i], false)
			if err != nil {
				return err
			}
			results[i] = res
			if res.Item != "" {
				keys = append(keys, res.Item)
			}
		}
		err = cs.scanDecision(tx.QueryRow(ctx, `
			UPDATE changesets SET status = 'applied', results = $2, applied_operations = $3,
			       decided_by = $4, decided_at = now(), updated_at = now()
			WHERE id = $1 RETURNING `+changesetDecisionColumns,
			cs.ID, results, order, caller.Actor.Subject))
		if err != nil {
			return err
		}
		cs.Results, cs.AppliedOperations = results, order
		run.w.changeset = ""
		return run.w.event(ctx, "changeset.applied", "changeset", cs.ID, "",
			map[string]any{"id": cs.ID, "title": cs.Title, "operations": order, "items": keys})
	})
	if err != nil {
		return Changeset{}, fmt.Errorf("store: apply changeset: %w", err)
	}
	return cs, nil
}

// checkChosen validates the chosen indexes and returns them in ascending
// order: at least one, each in range, none twice, and every $ref a chosen
// operation uses created by a chosen operation.
func checkChosen(ops []Operation, chosen []int) ([]int, error) {
	if len(chosen) == 0 {
		return nil, Errorf(CodeInvalid, "operations: choose at least one operation index")
	}
	picked := map[int]bool{}
	for _, i := range chosen {
		if i < 0 || i >= len(ops) {
			return nil, Errorf(CodeInvalid, "operations: index %d is out of range: the changeset has operations 0 to %d", i, len(ops)-1)
		}
		if picked[i] {
			return nil, Errorf(CodeInvalid, "operations: index %d is chosen twice", i)
		}
		picked[i] = true
	}
	definedBy := map[string]int{}
	for i, op := range ops {
		if op.Ref != "" {
			definedBy[op.Ref] = i
		}
	}
	order := slices.Sorted(maps.Keys(picked))
	for _, i := range order {
		for _, r := range ops[i].itemRefs() {
			name, isRef := strings.CutPrefix(r[1], "$")
			if j := definedBy[name]; isRef && !picked[j] {
				return nil, &Error{Code: CodeInvalid,
					Message: fmt.Sprintf("operations[%d]: %s uses %s, created by operations[%d], which is not chosen", i, r[0], r[1], j),
					Details: map[string]any{"operation": i, "requires": j}}
			}
		}
	}
	return order, nil
}

// changesetRun executes operations of one changeset in one transaction.
type changesetRun struct {
	w *trackerTx
	// refs maps each create_item's ref to the key it was given.
	refs map[string]string
}

func (r *changesetRun) resolve(s string) string {
	if name, ok := strings.CutPrefix(s, "$"); ok {
		return r.refs[name]
	}
	return s
}

func (r *changesetRun) resolvePtr(s *string) *string {
	if s == nil {
		return nil
	}
	v := r.resolve(*s)
	return &v
}

// run executes operation i. When proposing, an update_item without a version
// records the item's current one in op.
func (r *changesetRun) run(ctx context.Context, i int, op *Operation, proposing bool) (OperationResult, error) {
	res := OperationResult{Operation: i, Kind: op.Kind, Status: ResultApplied, Ref: op.Ref}
	switch op.Kind {
	case OpCreateItem:
		in := *op.Create
		in.Epic, in.Milestone = r.resolve(in.Epic), r.resolve(in.Milestone)
		it, err := r.w.createItem(ctx, in)
		if err != nil {
			return res, opError(i, err)
		}
		if op.Ref != "" {
			r.refs[op.Ref] = it.Key
		}
		res.Item, res.Version = it.Key, it.Version
	case OpUpdateItem:
		u := op.Update
		key := r.resolve(u.Item)
		it, err := itemByKey(ctx, r.w.tx, key, true)
		if err == nil && it.ProjectID != r.w.project.ID {
			err = Errorf(CodeNotFound, "item %s not found", key)
		}
		if IsCode(err, CodeNotFound) {
			err = Errorf(CodeInvalid, "update.item: no item %s in project %s", key, r.w.project.Key)
		}
		if err != nil {
			return res, opError(i, err)
		}
		if u.Version != 0 && u.Version != it.Version {
			return res, &Error{Code: CodeConflict,
				Message: fmt.Sprintf("operations[%d]: %s has changed since the changeset was proposed (proposed against version %d, now version %d)",
					i, key, u.Version, it.Version),
				Details: map[string]any{"operation": i, "item": key, "current_version": it.Version}}
		}
		if proposing && !strings.HasPrefix(u.Item, "$") {
			u.Version = it.Version
		}
		patch := u.ItemPatch
		patch.Epic, patch.Milestone = r.resolvePtr(patch.Epic), r.resolvePtr(patch.Milestone)
		out, err := r.w.updateItem(ctx, it, patch)
		if err != nil {
			return res, opError(i, err)
		}
		res.Item, res.Version = out.Key, out.Version
	case OpAddDependency:
		d := op.Dependency
		dep, err := r.w.addDependency(ctx, r.resolve(d.From), r.resolve(d.To), d.Type, "dependency.from", "dependency.to")
		if err != nil {
			return res, opError(i, err)
		}
		res.Dependency = dep.ID
	default:
		return res, opError(i, Errorf(CodeInvalid, "kind: unknown operation kind %q", op.Kind))
	}
	return res, nil
}
