package chat

import (
	"os"
	"strings"

	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/balletplanner/ballet/store"
)

type entryKind int

const (
	entryHuman entryKind = iota
	entryAssistant
	entryTool
	entryNote
	entryChangeset
	entryCommand
	entryHidden
)

type toolState int

const (
	toolRunning toolState = iota
	toolOK
	toolFailed
)

// entry is one block of the transcript.
type entry struct {
	kind entryKind
	turn string
	// text is a human's message, an answer while it streams, or a note.
	text string
	// md is a stored answer, rendered as Markdown; cache holds it rendered
	// at cacheWidth.
	md         string
	cache      string
	cacheWidth int
	tool       string
	input      string
	state      toolState
	errText    string
	// cs is the changeset an entryChangeset shows.
	cs *csView
	// failed marks the result of a command that failed.
	failed bool
}

// turnBlock is the entries of one turn, in the order they came, or one
// entry without a turn.
type turnBlock struct {
	turn    string
	entries []*entry
}

// transcript is what the chat screen shows, built from the outputs: one
// block per turn, in the order the turns were first seen (the order they
// were queued in), whatever the order their outputs interleave in.
type transcript struct {
	blocks []*turnBlock
	turns  map[string]*turnBlock // by turn
	humans map[string]*entry     // by turn
	live   map[string]*entry     // the answer streaming in, by turn
	tools  map[string]*entry     // by tool_use_id
	// ended holds the turns that are done, with the state their tools
	// that never finished are shown in.
	ended map[string]string
	// changesets are the changesets proposed, in the order their proposals
	// came, and by id.
	changesets []*csView
	csByID     map[string]*csView
}

func newTranscript() transcript {
	return transcript{turns: map[string]*turnBlock{}, humans: map[string]*entry{}, live: map[string]*entry{},
		tools: map[string]*entry{}, ended: map[string]string{}, csByID: map[string]*csView{}}
}

// block is the turn's block, added at the end when the turn is new.
func (t *transcript) block(turn string) *turnBlock {
	b := t.turns[turn]
	if b == nil {
		b = &turnBlock{turn: turn}
		t.blocks = append(t.blocks, b)
		t.turns[turn] = b
	}
	return b
}

// add appends e to its turn's block; an entry without a turn is a block
// of its own at the end.
func (t *transcript) add(e *entry) *entry {
	if e.turn == "" {
		t.blocks = append(t.blocks, &turnBlock{entries: []*entry{e}})
		return e
	}
	b := t.block(e.turn)
	b.entries = append(b.entries, e)
	return e
}

// human shows a human's message of a turn (once per turn), first in the
// turn's block.
func (t *transcript) human(turn, text string) {
	if e := t.humans[turn]; e != nil {
		return
	}
	e := &entry{kind: entryHuman, turn: turn, text: text}
	t.humans[turn] = e
	if turn == "" {
		t.add(e)
		return
	}
	b := t.block(turn)
	b.entries = append([]*entry{e}, b.entries...)
}

// rename gives turn from the id to the server chose for it. Outputs the
// server sent under to already join the block of from, which keeps its
// place and its human's message.
func (t *transcript) rename(from, to string) {
	b := t.turns[from]
	if b == nil || from == to {
		return
	}
	delete(t.turns, from)
	if other := t.turns[to]; other != nil {
		for _, e := range other.entries {
			if e.kind != entryHuman {
				b.entries = append(b.entries, e)
			}
		}
		for i, ob := range t.blocks {
			if ob == other {
				t.blocks = append(t.blocks[:i:i], t.blocks[i+1:]...)
				break
			}
		}
	}
	b.turn, t.turns[to] = to, b
	for _, e := range b.entries {
		e.turn = to
	}
	if h := t.humans[from]; h != nil {
		t.humans[to] = h
		delete(t.humans, from)
	}
	if e := t.live[from]; e != nil {
		t.live[to] = e
		delete(t.live, from)
	}
}

func (t *transcript) shown(turn string) bool { return t.humans[turn] != nil }

// setHuman fills in a message whose text was loaded later.
func (t *transcript) setHuman(turn, text string) {
	if e := t.humans[turn]; e != nil && e.text == "" {
		e.text = text
	}
}

// stream shows the turn's running round text so far.
func (t *transcript) stream(turn, text string) {
	e := t.live[turn]
	if e == nil {
		e = t.add(&entry{kind: entryAssistant, turn: turn})
		t.live[turn] = e
	}
	e.text = text
}

// answer replaces the streamed text with the stored answer.
func (t *transcript) answer(turn, md string) {
	e := t.live[turn]
	delete(t.live, turn)
	switch {
	case e != nil && strings.TrimSpace(md) == "":
		e.kind = entryHidden
	case e != nil:
		e.text, e.md = "", md
	case strings.TrimSpace(md) != "":
		t.add(&entry{kind: entryAssistant, turn: turn, md: md})
	}
}

// toolCall shows a tool call as running, or, when its turn is over
// already, as never finished.
func (t *transcript) toolCall(turn, id, name, input string) {
	if t.tools[id] != nil {
		return
	}
	e := t.add(&entry{kind: entryTool, turn: turn, tool: name, input: input})
	if why, over := t.ended[turn]; over {
		e.state, e.errText = toolFailed, why
	}
	t.tools[id] = e
}

// toolResult shows how a tool call ended.
func (t *transcript) toolResult(turn, id, name string, isError bool, text string) {
	e := t.tools[id]
	if e == nil {
		e = t.add(&entry{kind: entryTool, turn: turn, tool: name})
		t.tools[id] = e
	}
	e.state, e.errText = toolOK, ""
	if isError {
		e.state, e.errText = toolFailed, text
	}
}

func (t *transcript) note(turn, text string) {
	t.add(&entry{kind: entryNote, turn: turn, text: text})
}

// changeset shows a changeset proposed in turn, once: it returns nil when
// it is shown already.
func (t *transcript) changeset(turn, id string) *csView {
	if t.csByID[id] != nil {
		return nil
	}
	v := &csView{id: id}
	t.csByID[id] = v
	t.changesets = append(t.changesets, v)
	t.add(&entry{kind: entryChangeset, turn: turn, cs: v})
	return v
}

// commandResult shows what a command typed here did, at the end.
func (t *transcript) commandResult(text string, failed bool) {
	t.add(&entry{kind: entryCommand, text: text, failed: failed})
}

// done ends a turn: what streamed stays as it is, tools still running are
// marked cancelled (or interrupted, when the turn ended otherwise), and an
// end other than end_turn is said.
func (t *transcript) done(turn, reason string) {
	delete(t.live, turn)
	why := "interrupted"
	if reason == store.ReasonCancelled {
		why = "cancelled"
	}
	t.ended[turn] = why
	if b := t.turns[turn]; b != nil {
		for _, e := range b.entries {
			if e.kind == entryTool && e.state == toolRunning {
				e.state, e.errText = toolFailed, why
			}
		}
	}
	switch reason {
	case store.ReasonEndTurn, "":
	case store.ReasonCancelled:
		t.note(turn, "— cancelled")
	default:
		t.note(turn, "— stopped: "+reason)
	}
}

var (
	youStyle  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	okStyle   = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	failStyle = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
)

// render lays the transcript out at width; spin is the spinner's frame for
// tools still running.
func (t *transcript) render(width int, md *markdown, spin string) string {
	var b strings.Builder
	prev := entryHidden
	for _, e := range t.all() {
		if e.kind == entryHidden {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
			if e.kind == entryHuman || e.kind == entryAssistant || e.kind == entryCommand || prev == entryAssistant ||
				prev == entryCommand {
				b.WriteString("\n")
			}
		}
		prev = e.kind
		switch e.kind {
		case entryHuman:
			// Lines after the first hang under the text, not the prefix.
			text := lipgloss.NewStyle().Width(max(width-6, 10)).Render(e.text)
			b.WriteString(youStyle.Render("you ›") + " " + strings.ReplaceAll(text, "\n", "\n      "))
		case entryAssistant:
			if e.md != "" {
				if e.cacheWidth != width {
					e.cache, e.cacheWidth = md.render(e.md, width), width
				}
				b.WriteString(e.cache)
			} else {
				b.WriteString(lipgloss.NewStyle().Width(width).PaddingLeft(2).Render(e.text))
			}
		case entryTool:
			b.WriteString(ansi.Truncate(toolLine(e, spin), width, "…"))
		case entryNote:
			b.WriteString(dim.Render(ansi.Truncate(e.text, width, "…")))
		case entryChangeset:
			b.WriteString(e.cs.render(width))
		case entryCommand:
			b.WriteString(commandLine(e, width))
		}
	}
	return b.String()
}

// all is the entries block by block.
func (t *transcript) all() []*entry {
	var es []*entry
	for _, b := range t.blocks {
		es = append(es, b.entries...)
	}
	return es
}

func toolLine(e *entry, spin string) string {
	switch e.state {
	case toolOK:
		return okStyle.Render("✓") + " " + e.tool
	case toolFailed:
		return failStyle.Render("✗") + " " + e.tool + ": " + e.errText
	}
	line := "⟳ " + e.tool
	if e.input != "" {
		line += " " + e.input
	}
	return spin + " " + line
}

// markdown renders stored answers with glamour, re-made when the width changes.
type markdown struct {
	width int
	r     *glamour.TermRenderer
}

func newMarkdown() *markdown { return &markdown{} }

func (m *markdown) render(text string, width int) string {
	if m.r == nil || m.width != width {
		style := glamour.WithStandardStyle("dark")
		switch {
		case os.Getenv("GLAMOUR_STYLE") != "":
			style = glamour.WithEnvironmentConfig()
		case os.Getenv("NO_COLOR") != "":
			style = glamour.WithStandardStyle("notty")
		}
		r, err := glamour.NewTermRenderer(style, glamour.WithWordWrap(max(width-4, 20)))
		if err != nil {
			return text
		}
		m.r, m.width = r, width
	}
	out, err := m.r.Render(text)
	if err != nil {
		return text
	}
	return strings.Trim(out, "\n")
}
