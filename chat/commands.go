package chat

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/balletplanner/ballet/store"
)

// commands are the commands typed in the composer: the chat runs them
// and sends nothing. Any other text, one starting with "/" too, is a
// message to the planner.
var commands = []struct{ name, usage, help string }{
	{"/apply", "/apply", "apply, whole, the latest changeset proposed that waits for a decision"},
	{"/apply", "/apply 1,3", "apply only those of its operations (numbered as shown; 2-4 is a range)"},
	{"/reject", "/reject [reason]", "reject it, with an optional reason"},
	{"/interrupt", "/interrupt text", "stop the running and queued turns and send text, which runs next"},
	{"/help", "/help", "show this help"},
}

// parseCommand splits text into a command of commands and its
// arguments; ok is false when text is a message.
func parseCommand(text string) (name, args string, ok bool) {
	if !strings.HasPrefix(text, "/") {
		return "", "", false
	}
	name, args = text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		name, args = text[:i], strings.TrimSpace(text[i:])
	}
	for _, c := range commands {
		if c.name == name {
			return name, args, true
		}
	}
	return "", "", false
}

// parseOps reads the operation numbers of /apply (from 1, separated by
// commas or blanks, a-b for a range) as 0-based indexes in ascending
// order; none given is nil, for all of them.
func parseOps(args string) ([]int, error) {
	fields := strings.FieldsFunc(args, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(fields) == 0 {
		return nil, nil
	}
	var ops []int
	for _, f := range fields {
		lo, hi, isRange := strings.Cut(f, "-")
		a, errA := strconv.Atoi(lo)
		b, errB := a, error(nil)
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || a < 1 || b < a {
			return nil, fmt.Errorf("chat: /apply %s: %q is not an operation number; operations are numbered from 1, "+
				"as in /apply 1,3 or /apply 2-4", args, f)
		}
		for n := a; n <= b; n++ {
			ops = append(ops, n-1)
		}
	}
	slices.Sort(ops)
	return slices.Compact(ops), nil
}

// command runs a command of commands.
func (m *model) command(name, args string) tea.Cmd {
	m.notice = ""
	switch name {
	case "/apply":
		chosen, err := parseOps(args)
		if err != nil {
			m.tr.commandResult(err.Error(), true)
			return nil
		}
		return m.decide("apply", chosen, "")
	case "/reject":
		return m.decide("reject", nil, args)
	case "/interrupt": // with text it is a message (send)
		m.tr.commandResult("chat: /interrupt needs the message to send, as in /interrupt text", true)
		return nil
	}
	m.tr.commandResult(helpText(), false)
	return nil
}

// helpText lists the commands and keys.
func helpText() string {
	var b strings.Builder
	b.WriteString("Commands (anything else you type is sent to the planner):")
	for _, c := range commands {
		fmt.Fprintf(&b, "\n  %-17s %s", c.usage, c.help)
	}
	b.WriteString("\nKeys: Enter sends · Alt+Enter or Ctrl+J new line · PgUp/PgDn scroll\n" +
		"      Ctrl-C cancels the running turn; a second Ctrl-C quits")
	return b.String()
}

// pendingChangeset is the changeset proposed last in this session of those
// not known to be applied or rejected, or nil.
func (m *model) pendingChangeset() *csView {
	for _, v := range slices.Backward(m.tr.changesets) {
		if v.cs == nil || v.cs.Status == store.ChangesetProposed {
			return v
		}
	}
	return nil
}

// decide applies (the chosen operations of) or rejects the pending
// changeset over REST, as the web app's changeset card does.
func (m *model) decide(verb string, chosen []int, reason string) tea.Cmd {
	v := m.pendingChangeset()
	switch {
	case v == nil && len(m.tr.changesets) == 0:
		m.tr.commandResult("nothing to "+verb+": the planner has proposed no changeset in this session", false)
		return nil
	case v == nil:
		m.tr.commandResult("nothing to "+verb+": every changeset proposed in this session is applied or rejected", false)
		return nil
	case m.rest == nil:
		m.tr.commandResult("chat: "+verb+" "+v.name()+": no connection to the api", true)
		return nil
	}
	if err := checkChosen(v.cs, chosen); err != nil {
		m.tr.commandResult(err.Error(), true)
		return nil
	}
	rest, ctx, id, known := m.rest, m.ctx, v.id, v.cs
	return func() tea.Msg {
		cs := known
		if cs == nil { // not loaded yet: /apply needs its operations
			got, err := rest.changeset(ctx, id)
			if err != nil {
				return decidedMsg{id: id, verb: verb, err: err}
			}
			cs = &got
			if err := checkChosen(cs, chosen); err != nil {
				return decidedMsg{id: id, verb: verb, cs: cs, err: err}
			}
		}
		name := "“" + cs.Title + "”"
		var out store.Changeset
		var err error
		if verb == "apply" {
			ops := chosen
			if ops == nil {
				for i := range cs.Operations {
					ops = append(ops, i)
				}
			}
			out, err = rest.applyChangeset(ctx, id, name, ops)
		} else {
			out, err = rest.rejectChangeset(ctx, id, name, reason)
		}
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Code == string(store.CodeConflict) {
				// Decided elsewhere meanwhile, or an item changed: show it as it is.
				if now, lerr := rest.changeset(ctx, id); lerr == nil {
					cs = &now
				}
			}
			return decidedMsg{id: id, verb: verb, chosen: chosen, reason: reason, cs: cs, err: err}
		}
		return decidedMsg{id: id, verb: verb, chosen: chosen, reason: reason, cs: &out}
	}
}

// checkChosen refuses operation numbers past the changeset's last, when it
// is loaded.
func checkChosen(cs *store.Changeset, chosen []int) error {
	if cs == nil || len(chosen) == 0 || chosen[len(chosen)-1] < len(cs.Operations) {
		return nil
	}
	return fmt.Errorf("chat: /apply %d: “%s” has operations 1 to %d", chosen[len(chosen)-1]+1, cs.Title, len(cs.Operations))
}

// decided shows the outcome of /apply or /reject.
func (m *model) decided(msg decidedMsg) {
	v := m.tr.csByID[msg.id]
	if v != nil && msg.cs != nil {
		v.cs, v.err = msg.cs, ""
	}
	if msg.err != nil {
		m.tr.commandResult(msg.err.Error(), true)
		return
	}
	cs := msg.cs
	if msg.verb == "reject" {
		why := ""
		if msg.reason != "" {
			why = " (reason: " + msg.reason + ")"
		}
		m.tr.commandResult(fmt.Sprintf("✓ rejected “%s”%s: nothing in the plan changed", cs.Title, why), false)
		return
	}
	m.tr.commandResult(appliedLine(cs, msg.chosen), false)
}

// appliedLine says what applying cs did: the operations applied and the
// keys created or updated.
func appliedLine(cs *store.Changeset, chosen []int) string {
	what := fmt.Sprintf("✓ applied “%s” whole (%s)", cs.Title, plural(len(cs.Operations), "operation"))
	if chosen != nil {
		nums := make([]string, len(chosen))
		for i, n := range chosen {
			nums[i] = strconv.Itoa(n + 1)
		}
		word := "operation"
		if len(chosen) > 1 {
			word = "operations"
		}
		what = fmt.Sprintf("✓ applied %s %s of “%s”", word, strings.Join(nums, ", "), cs.Title)
	}
	var created, updated []string
	deps := 0
	for _, r := range cs.Results {
		if r.Status != store.ResultApplied {
			continue
		}
		switch {
		case r.Kind == store.OpCreateItem && r.Item != "":
			created = append(created, r.Item)
		case r.Kind == store.OpUpdateItem && r.Item != "":
			updated = append(updated, r.Item)
		case r.Kind == store.OpAddDependency:
			deps++
		}
	}
	var parts []string
	if len(created) > 0 {
		parts = append(parts, "created "+strings.Join(created, ", "))
	}
	if len(updated) > 0 {
		parts = append(parts, "updated "+strings.Join(updated, ", "))
	}
	switch {
	case deps == 1:
		parts = append(parts, "added 1 dependency")
	case deps > 1:
		parts = append(parts, fmt.Sprintf("added %d dependencies", deps))
	}
	if len(parts) == 0 {
		return what
	}
	return what + ": " + strings.Join(parts, "; ")
}

// commandLine renders what a command did, wrapped to width.
func commandLine(e *entry, width int) string {
	if e.failed {
		return failStyle.Render(lipgloss.NewStyle().Width(width).Render("✗ " + e.text))
	}
	return lipgloss.NewStyle().Width(width).Render(e.text)
}
