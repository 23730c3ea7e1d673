package main

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
}

// transcript is what the chat screen shows, built from the outputs.
type transcript struct {
	entries []*entry
	humans  map[string]*entry // by turn
	live    map[string]*entry // the answer streaming in, by turn
	tools   map[string]*entry // by tool_use_id
}

func newTranscript() transcript {
	return transcript{humans: map[string]*entry{}, live: map[string]*entry{}, tools: map[string]*entry{}}
}

func (t *transcript) add(e *entry) *entry {
	t.entries = append(t.entries, e)
	return e
}

// human shows a human's message of a turn (once per turn).
func (t *transcript) human(turn, text string) {
	if e := t.humans[turn]; e != nil {
		return
	}
	t.humans[turn] = t.add(&entry{kind: entryHuman, turn: turn, text: text})
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

func (t *transcript) toolCall(turn, id, name, input string) {
	if t.tools[id] != nil {
		return
	}
	t.tools[id] = t.add(&entry{kind: entryTool, turn: turn, tool: name, input: input})
}

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

// done ends a turn: what streamed stays as it is, tools still running are
// marked interrupted, and an end other than end_turn is said.
func (t *transcript) done(turn, reason string) {
	delete(t.live, turn)
	for _, e := range t.entries {
		if e.kind == entryTool && e.turn == turn && e.state == toolRunning {
			e.state, e.errText = toolFailed, "interrupted"
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
	for _, e := range t.entries {
		if e.kind == entryHidden {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
			if e.kind == entryHuman || e.kind == entryAssistant || prev == entryAssistant {
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
		}
	}
	return b.String()
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
