package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// toolPropose is the planner's tool that proposes a changeset.
const toolPropose = "propose_changeset"

// csView is a changeset the planner proposed, as the transcript shows it.
// cs is replaced, never changed, so that a command may read the one it
// was given while the screen moves on.
type csView struct {
	id string
	// cs is the changeset as last loaded or decided; nil until loaded.
	cs *store.Changeset
	// err says why it could not be loaded.
	err string
}

// Messages of the changesets.
type (
	// changesetMsg is a changeset loaded to be shown.
	changesetMsg struct {
		id  string
		cs  store.Changeset
		err error
	}
	// decidedMsg is the outcome of /apply or /reject: the changeset as it
	// is now (nil when it could not be read) and the error, if any.
	decidedMsg struct {
		id     string
		verb   string
		chosen []int  // the operations /apply chose, 0-based; nil for all
		reason string // the reason /reject gave
		cs     *store.Changeset
		err    error
	}
)

// proposedChangeset is the id of the changeset a successful
// propose_changeset result holds ({"id": …}), or "".
func proposedChangeset(o rpcclient.Output) string {
	if o.Type != store.OutputToolResult || o.Tool != toolPropose || o.IsError {
		return ""
	}
	var res struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(o.Text), &res) != nil {
		return ""
	}
	return res.ID
}

// showChangeset shows the changeset id, proposed in turn, under its tool
// line, and loads its operations.
func (m *model) showChangeset(turn, id string) tea.Cmd {
	if m.tr.changeset(turn, id) == nil || m.rest == nil {
		return nil
	}
	rest, ctx := m.rest, m.ctx
	return func() tea.Msg {
		cs, err := rest.changeset(ctx, id)
		return changesetMsg{id: id, cs: cs, err: err}
	}
}

// loaded shows a loaded changeset, or why it could not be loaded.
func (m *model) loaded(msg changesetMsg) {
	v := m.tr.csByID[msg.id]
	switch {
	case v == nil:
	case msg.err != nil:
		if v.cs == nil {
			v.err = msg.err.Error()
		}
	default:
		cs := msg.cs
		v.cs, v.err = &cs, ""
	}
}

// name is how a confirmation names the changeset: its title once loaded.
func (v *csView) name() string {
	if v.cs != nil && v.cs.Title != "" {
		return "“" + v.cs.Title + "”"
	}
	return v.id
}

var csStyle = lipgloss.NewStyle().Bold(true)

// render lays the changeset out at width: a head line with its title and
// status, then one line per operation; while it waits for a decision, how
// to make it.
func (v *csView) render(width int) string {
	cut := func(s string) string { return ansi.Truncate(s, width, "…") }
	switch {
	case v.cs == nil && v.err != "":
		return failStyle.Render(cut("✗ changeset " + v.id + ": " + v.err))
	case v.cs == nil:
		return dim.Render(cut("◇ changeset " + v.id + " · loading…"))
	}
	cs := v.cs
	lines := []string{csStyle.Render(cut(fmt.Sprintf("◇ changeset “%s” · %s · %s", cs.Title, cs.Status, plural(len(cs.Operations), "operation"))))}
	for i := range cs.Operations {
		lines = append(lines, cut(opLine(cs, i)))
	}
	if cs.Status == store.ChangesetProposed {
		lines = append(lines, dim.Render(cut("  /apply applies it · /apply 1,3 only those operations · /reject [reason] rejects it")))
	}
	return strings.Join(lines, "\n")
}

// opLine is operation i of cs on one line: its number (from 1, as /apply
// takes them), kind and item; once applied, whether it was and the key it
// made or changed.
func opLine(cs *store.Changeset, i int) string {
	op := cs.Operations[i]
	var what string
	switch {
	case op.Create != nil:
		what = fmt.Sprintf("%s “%s”", op.Create.Kind, op.Create.Title)
		if op.Ref != "" {
			what += " ($" + op.Ref + ")"
		}
	case op.Update != nil:
		what = op.Update.Item + " " + patchFields(op.Update.ItemPatch)
	case op.Dependency != nil:
		what = op.Dependency.From + " " + op.Dependency.Type + " " + op.Dependency.To
	}
	line := fmt.Sprintf("%d. %s %s", i+1, op.Kind, what)
	if cs.Status != store.ChangesetApplied || i >= len(cs.Results) {
		return "    " + line
	}
	r := cs.Results[i]
	if r.Status != store.ResultApplied {
		return "  – " + line + " (not applied)"
	}
	if r.Item != "" && op.Kind == store.OpCreateItem {
		line += " → " + r.Item
	}
	return "  " + okStyle.Render("✓") + " " + line
}

// patchFields names what an update changes, with the new title.
func patchFields(p store.ItemPatch) string {
	var fields []string
	if p.Title != nil {
		fields = append(fields, "title “"+*p.Title+"”")
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"description", p.Description != nil}, {"type", p.Type != nil},
		{"acceptance criteria", p.AcceptanceCriteria != nil}, {"epic", p.Epic != nil}, {"milestone", p.Milestone != nil}} {
		if f.set {
			fields = append(fields, f.name)
		}
	}
	return strings.Join(fields, ", ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// changeset loads a changeset.
func (c *restClient) changeset(ctx context.Context, id string) (store.Changeset, error) {
	var cs store.Changeset
	if err := c.do(ctx, http.MethodGet, "/changesets/"+url.PathEscape(id), nil, &cs); err != nil {
		return store.Changeset{}, fmt.Errorf("chat: changeset %s: %w", id, err)
	}
	return cs, nil
}

// applyChangeset applies the operations ops (0-based) of changeset id,
// which name calls; the api's error says operations by their numbers
// from 1.
func (c *restClient) applyChangeset(ctx context.Context, id, name string, ops []int) (store.Changeset, error) {
	var cs store.Changeset
	if err := c.do(ctx, http.MethodPost, "/changesets/"+url.PathEscape(id)+"/apply", map[string][]int{"operations": ops}, &cs); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			ae.Message = opIndexes.ReplaceAllStringFunc(ae.Message, func(s string) string {
				n, _ := strconv.Atoi(opIndexes.FindStringSubmatch(s)[1])
				return "operation " + strconv.Itoa(n+1)
			})
		}
		return store.Changeset{}, fmt.Errorf("chat: apply %s: %w", name, err)
	}
	return cs, nil
}

// opIndexes is how the api names an operation, by its 0-based index.
var opIndexes = regexp.MustCompile(`operations\[(\d+)\]`)

// rejectChangeset rejects changeset id, which name calls, with an
// optional reason.
func (c *restClient) rejectChangeset(ctx context.Context, id, name, reason string) (store.Changeset, error) {
	body := map[string]string{}
	if reason != "" {
		body["reason"] = reason
	}
	var cs store.Changeset
	if err := c.do(ctx, http.MethodPost, "/changesets/"+url.PathEscape(id)+"/reject", body, &cs); err != nil {
		return store.Changeset{}, fmt.Errorf("chat: reject %s: %w", name, err)
	}
	return cs, nil
}
