package store

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Ticket states of SPEC §3.
const (
	StateBacklog          = "backlog"
	StateReady            = "ready"
	StateInProgress       = "in_progress"
	StateWaitingForAnswer = "waiting_for_answer"
	StatePaused           = "paused"
	StateDone             = "done"
	StateCancelled        = "cancelled"
	// StateOpen is the initial state of milestones and epics.
	StateOpen = "open"
)

// Limits of SPEC §3.
const (
	MaxTitleLen               = 300
	MaxDescriptionLen         = 50000
	MaxAcceptanceCriteria     = 50
	MaxAcceptanceCriterionLen = 2000
)

var (
	itemKinds       = []string{KindMilestone, KindEpic, KindTicket}
	ticketTypes     = []string{"feature", "bug", "tech_debt", "docs", "spike"}
	reviewModes     = []string{"agent", "agent+human"}
	mergeModes      = []string{"auto", "manual"}
	ticketStates    = []string{StateBacklog, StateReady, StateInProgress, StateWaitingForAnswer, StatePaused, StateDone, StateCancelled}
	containerStates = []string{StateOpen, StateDone, StateCancelled}
)

// ticketTransitions are the human transitions of SPEC §3.
var ticketTransitions = map[string][]string{
	StateBacklog:          {StateReady, StateCancelled, StateDone},
	StateReady:            {StateBacklog, StatePaused, StateCancelled, StateDone},
	StateInProgress:       {StatePaused, StateCancelled},
	StateWaitingForAnswer: {StatePaused, StateCancelled},
	StatePaused:           {StateReady, StateBacklog, StateCancelled, StateDone},
	StateDone:             {StateBacklog},
	StateCancelled:        {StateBacklog},
}

// containerTransitions apply to milestones and epics.
var containerTransitions = map[string][]string{
	StateOpen:      {StateDone, StateCancelled},
	StateDone:      {StateOpen},
	StateCancelled: {StateOpen},
}

// CanTransition reports whether an item of kind may move from one state to
// another by a human transition.
func CanTransition(kind, from, to string) bool {
	m := containerTransitions
	if kind == KindTicket {
		m = ticketTransitions
	}
	return slices.Contains(m[from], to)
}

// ItemStates lists the states an item of kind can be in.
func ItemStates(kind string) []string {
	if kind == KindTicket {
		return slices.Clone(ticketStates)
	}
	return slices.Clone(containerStates)
}

func checkEnum(field, v string, allowed []string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return Errorf(CodeInvalid, "%s: must be one of %s, got %q", field, strings.Join(allowed, ", "), v)
}

func checkTitle(title string) error {
	if strings.TrimSpace(title) == "" {
		return Errorf(CodeInvalid, "title: must not be empty")
	}
	if n := utf8.RuneCountInString(title); n > MaxTitleLen {
		return Errorf(CodeInvalid, "title: must be at most %d characters, got %d", MaxTitleLen, n)
	}
	return nil
}

func checkDescription(d string) error {
	if n := utf8.RuneCountInString(d); n > MaxDescriptionLen {
		return Errorf(CodeInvalid, "description: must be at most %d characters, got %d", MaxDescriptionLen, n)
	}
	return nil
}

func checkCriteria(c []string) error {
	if len(c) > MaxAcceptanceCriteria {
		return Errorf(CodeInvalid, "acceptance_criteria: at most %d entries, got %d", MaxAcceptanceCriteria, len(c))
	}
	for i, s := range c {
		if strings.TrimSpace(s) == "" {
			return Errorf(CodeInvalid, "acceptance_criteria[%d]: must not be empty", i)
		}
		if n := utf8.RuneCountInString(s); n > MaxAcceptanceCriterionLen {
			return Errorf(CodeInvalid, "acceptance_criteria[%d]: must be at most %d characters, got %d", i, MaxAcceptanceCriterionLen, n)
		}
	}
	return nil
}

func checkPolicy(p *Policy) error {
	if p == nil {
		return nil
	}
	if p.ReviewMode != "" {
		if err := checkEnum("policy.review_mode", p.ReviewMode, reviewModes); err != nil {
			return err
		}
	}
	if p.MergeMode != "" {
		return checkEnum("policy.merge_mode", p.MergeMode, mergeModes)
	}
	return nil
}

// checkNewItem validates what can be checked without the database.
func checkNewItem(in NewItem) error {
	if err := checkEnum("kind", in.Kind, itemKinds); err != nil {
		return err
	}
	if err := checkTitle(in.Title); err != nil {
		return err
	}
	if err := checkDescription(in.Description); err != nil {
		return err
	}
	if in.Kind != KindTicket {
		switch {
		case in.Type != "":
			return Errorf(CodeInvalid, "type: only tickets have a type, not a %s", in.Kind)
		case len(in.AcceptanceCriteria) > 0:
			return Errorf(CodeInvalid, "acceptance_criteria: only tickets have acceptance criteria, not a %s", in.Kind)
		case in.Policy != nil:
			return Errorf(CodeInvalid, "policy: only tickets have a policy, not a %s", in.Kind)
		case in.Epic != "":
			return Errorf(CodeInvalid, "epic: only tickets belong to an epic, not a %s", in.Kind)
		case in.Kind == KindMilestone && in.Milestone != "":
			return Errorf(CodeInvalid, "milestone: a milestone cannot belong to a milestone")
		}
		return nil
	}
	if in.Type != "" {
		if err := checkEnum("type", in.Type, ticketTypes); err != nil {
			return err
		}
	}
	if err := checkCriteria(in.AcceptanceCriteria); err != nil {
		return err
	}
	return checkPolicy(in.Policy)
}

// checkPatch validates a patch against the kind of the item it changes.
func checkPatch(kind string, p ItemPatch) error {
	if p.Empty() {
		return Errorf(CodeInvalid, "nothing to change: give at least one of title, description, type, acceptance_criteria, policy, epic, milestone")
	}
	if p.Title != nil {
		if err := checkTitle(*p.Title); err != nil {
			return err
		}
	}
	if p.Description != nil {
		if err := checkDescription(*p.Description); err != nil {
			return err
		}
	}
	if kind != KindTicket {
		switch {
		case p.Type != nil:
			return Errorf(CodeInvalid, "type: only tickets have a type, not a %s", kind)
		case p.AcceptanceCriteria != nil:
			return Errorf(CodeInvalid, "acceptance_criteria: only tickets have acceptance criteria, not a %s", kind)
		case p.Policy != nil:
			return Errorf(CodeInvalid, "policy: only tickets have a policy, not a %s", kind)
		case p.Epic != nil && *p.Epic != "":
			return Errorf(CodeInvalid, "epic: only tickets belong to an epic, not a %s", kind)
		case kind == KindMilestone && p.Milestone != nil && *p.Milestone != "":
			return Errorf(CodeInvalid, "milestone: a milestone cannot belong to a milestone")
		}
		return nil
	}
	if p.Type != nil {
		if err := checkEnum("type", *p.Type, ticketTypes); err != nil {
			return err
		}
	}
	if p.AcceptanceCriteria != nil {
		if err := checkCriteria(*p.AcceptanceCriteria); err != nil {
			return err
		}
	}
	return checkPolicy(p.Policy)
}

func checkItemFilter(f ItemFilter) error {
	if f.Kind != "" {
		if err := checkEnum("kind", f.Kind, itemKinds); err != nil {
			return err
		}
	}
	if f.State != "" {
		states := ticketStates
		if f.Kind != "" && f.Kind != KindTicket {
			states = containerStates
		} else if f.Kind == "" {
			states = append(slices.Clone(ticketStates), StateOpen)
		}
		if err := checkEnum("state", f.State, states); err != nil {
			return err
		}
	}
	if f.Limit < 0 {
		return Errorf(CodeInvalid, "limit: must not be negative")
	}
	return nil
}

// transitionError names the refused move.
func transitionError(kind, from, to string) error {
	allowed := containerTransitions[from]
	if kind == KindTicket {
		allowed = ticketTransitions[from]
	}
	return &Error{Code: CodeInvalid,
		Message: fmt.Sprintf("transition not allowed: %s → %s (a %s in %s may move to %s)", from, to, kind, from, strings.Join(allowed, ", ")),
		Details: map[string]any{"from": from, "to": to, "allowed": allowed}}
}
