package store

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Operation kinds of SPEC §4.
const (
	OpCreateItem    = "create_item"
	OpUpdateItem    = "update_item"
	OpAddDependency = "add_dependency"
)

// Limits of SPEC §4.
const (
	MaxChangesetOperations = 200
	MaxChangesetTitleLen   = 300
	MaxChangesetSummaryLen = 50000
)

var (
	opKinds = []string{OpCreateItem, OpUpdateItem, OpAddDependency}
	refRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

// Operation is one step of a changeset: exactly one payload, matching Kind.
// An item reference is an existing key or "$<ref>" of an earlier create_item.
type Operation struct {
	Kind       string          `json:"kind"`
	Ref        string          `json:"ref,omitempty"`
	Create     *NewItem        `json:"create,omitempty"`
	Update     *ItemUpdate     `json:"update,omitempty"`
	Dependency *DependencySpec `json:"dependency,omitempty"`
}

// ItemUpdate is the payload of update_item. Version is the item version the
// update was proposed against: the proposer may send the version it read,
// and otherwise the store records the current one; apply refuses with a
// conflict when the item has changed since.
type ItemUpdate struct {
	Item string `json:"item"`
	ItemPatch
	Version int64 `json:"version,omitempty"`
}

// DependencySpec is the payload of add_dependency.
type DependencySpec struct {
	From string `json:"from"`
	To   string `json:"to"`
	Type string `json:"type"`
}

// Proposal is what ProposeChangeset takes.
type Proposal struct {
	Title      string      `json:"title"`
	Summary    string      `json:"summary,omitempty"`
	Operations []Operation `json:"operations"`
	// SessionID links the changeset to the planner session that proposed
	// it; empty takes it from a planner actor's subject.
	SessionID string `json:"-"`
	// Then, when set, runs in the transaction of the write, before commit.
	Then Then[Changeset] `json:"-"`
}

// itemRefs lists the item references of an operation with their field names.
func (op Operation) itemRefs() [][2]string {
	var out [][2]string
	add := func(field, v string) {
		if v != "" {
			out = append(out, [2]string{field, v})
		}
	}
	switch {
	case op.Create != nil:
		add("create.epic", op.Create.Epic)
		add("create.milestone", op.Create.Milestone)
	case op.Update != nil:
		add("update.item", op.Update.Item)
		if op.Update.Epic != nil {
			add("update.epic", *op.Update.Epic)
		}
		if op.Update.Milestone != nil {
			add("update.milestone", *op.Update.Milestone)
		}
	case op.Dependency != nil:
		add("dependency.from", op.Dependency.From)
		add("dependency.to", op.Dependency.To)
	}
	return out
}

// Validate checks what can be checked without the database: sizes, kinds,
// payloads, refs and one update per item. A failure names the operation.
func (p Proposal) Validate() error {
	if strings.TrimSpace(p.Title) == "" {
		return Errorf(CodeInvalid, "title: must not be empty")
	}
	if n := utf8.RuneCountInString(p.Title); n > MaxChangesetTitleLen {
		return Errorf(CodeInvalid, "title: must be at most %d characters, got %d", MaxChangesetTitleLen, n)
	}
	if n := utf8.RuneCountInString(p.Summary); n > MaxChangesetSummaryLen {
		return Errorf(CodeInvalid, "summary: must be at most %d characters, got %d", MaxChangesetSummaryLen, n)
	}
	if n := len(p.Operations); n < 1 || n > MaxChangesetOperations {
		return Errorf(CodeInvalid, "operations: must hold 1 to %d operations, got %d", MaxChangesetOperations, n)
	}
	refs := map[string]int{}    // ref → index of its create_item
	updated := map[string]int{} // item reference → index of its update_item
	for i, op := range p.Operations {
		if err := validateOperation(i, op, refs, updated); err != nil {
			return opError(i, err)
		}
		if op.Ref != "" {
			refs[op.Ref] = i
		}
		if op.Update != nil {
			updated[op.Update.Item] = i
		}
	}
	return nil
}

func validateOperation(i int, op Operation, refs, updated map[string]int) error {
	if err := checkEnum("kind", op.Kind, opKinds); err != nil {
		return err
	}
	payloads := 0
	for _, set := range []bool{op.Create != nil, op.Update != nil, op.Dependency != nil} {
		if set {
			payloads++
		}
	}
	want := map[string]bool{OpCreateItem: op.Create != nil, OpUpdateItem: op.Update != nil,
		OpAddDependency: op.Dependency != nil}[op.Kind]
	if payloads != 1 || !want {
		return Errorf(CodeInvalid, "a %s operation carries exactly one payload, %q", op.Kind,
			map[string]string{OpCreateItem: "create", OpUpdateItem: "update", OpAddDependency: "dependency"}[op.Kind])
	}
	if op.Ref != "" {
		if op.Kind != OpCreateItem {
			return Errorf(CodeInvalid, "ref: only a create_item has a ref")
		}
		if !refRe.MatchString(op.Ref) {
			return Errorf(CodeInvalid, "ref: must match %s, got %q", refRe, op.Ref)
		}
		if j, ok := refs[op.Ref]; ok {
			return Errorf(CodeInvalid, "ref: $%s is already defined by operations[%d]", op.Ref, j)
		}
	}
	for _, r := range op.itemRefs() {
		name, isRef := strings.CutPrefix(r[1], "$")
		if _, ok := refs[name]; isRef && !ok {
			return Errorf(CodeInvalid, "%s: unknown reference %s (a $ref names an earlier create_item)", r[0], r[1])
		}
	}
	switch op.Kind {
	case OpUpdateItem:
		if op.Update.Item == "" {
			return Errorf(CodeInvalid, "update.item: required")
		}
		if op.Update.Empty() {
			return Errorf(CodeInvalid, "update: nothing to change")
		}
		if j, ok := updated[op.Update.Item]; ok {
			return Errorf(CodeInvalid, "update.item: %s is already updated by operations[%d] (one update per item)", op.Update.Item, j)
		}
		if strings.HasPrefix(op.Update.Item, "$") && op.Update.Version != 0 {
			return Errorf(CodeInvalid, "update.version: only for existing items")
		}
		if op.Update.Version < 0 {
			return Errorf(CodeInvalid, "update.version: must be positive")
		}
	case OpAddDependency:
		if op.Dependency.From == "" || op.Dependency.To == "" {
			return Errorf(CodeInvalid, "dependency: from and to are required")
		}
		if err := checkEnum("dependency.type", op.Dependency.Type, dependencyTypes); err != nil {
			return err
		}
	}
	return nil
}

// CheckNoPolicy refuses a proposal that sets any ticket policy: how agents'
// work is reviewed and merged is for a human to decide. The planner's tools
// call it; ProposeChangeset applies it to every caller that is not a human.
func (p Proposal) CheckNoPolicy() error {
	for i, op := range p.Operations {
		if (op.Create != nil && op.Create.Policy != nil) || (op.Update != nil && op.Update.Policy != nil) {
			return &Error{Code: CodeInvalid,
				Message: fmt.Sprintf("operations[%d]: policy: the planner may not set a policy; a human sets it", i),
				Details: map[string]any{"operation": i}}
		}
	}
	return nil
}

// opError prefixes err with the operation's index. A duplicate is invalid
// in a changeset, not already_exists.
func opError(i int, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Errorf("operations[%d]: %w", i, err)
	}
	code := e.Code
	if code == CodeAlreadyExists {
		code = CodeInvalid
	}
	details := maps.Clone(e.Details)
	if details == nil {
		details = map[string]any{}
	}
	details["operation"] = i
	return &Error{Code: code, Message: fmt.Sprintf("operations[%d]: %s", i, e.Message), Details: details}
}
