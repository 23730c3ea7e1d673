package chat

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/balletplanner/ballet/store"
)

// pickTarget finds the session from the flags, asking in a list for what
// they leave open: the project, then an existing session or a new one.
func pickTarget(ctx context.Context, rest *restClient, o Options) (target, error) {
	if o.Session != "" {
		return sessionTarget(ctx, rest, o.Session)
	}
	p, list, err := projectFromFlags(ctx, rest, o.Project)
	if err != nil {
		return target{}, err
	}
	if p.Key == "" {
		labels := make([]string, len(list))
		for i, q := range list {
			labels[i] = q.Key + "  " + q.Name
		}
		i, err := pick(ctx, "Pick a project", labels)
		if err != nil || i < 0 {
			return target{}, err
		}
		p = list[i]
	}
	if o.New {
		return newSessionTarget(p), nil
	}
	sessions, err := rest.sessions(ctx, p.Key)
	if err != nil {
		return target{}, err
	}
	if len(sessions) == 0 {
		return newSessionTarget(p), nil
	}
	labels := []string{"+ new session"}
	for _, s := range sessions {
		label := s.Title + " · " + ago(time.Since(s.UpdatedAt))
		if s.Running {
			label += " · running"
		}
		labels = append(labels, label)
	}
	i, err := pick(ctx, "Pick a session of "+p.Key, labels)
	switch {
	case err != nil || i < 0:
		return target{}, err
	case i == 0:
		return newSessionTarget(p), nil
	}
	return sessionTarget(ctx, rest, sessions[i-1].ID)
}

// ago says how long ago something was, coarsely.
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// pick shows a list and returns the index chosen, or -1 when the human
// left it (q, Esc, Ctrl-C).
func pick(ctx context.Context, title string, items []string) (int, error) {
	m, err := tea.NewProgram(pickerModel{title: title, items: items, chosen: -1}, tea.WithContext(ctx)).Run()
	if err != nil {
		return -1, fmt.Errorf("chat: %s: %w", strings.ToLower(title), err)
	}
	return m.(pickerModel).chosen, nil
}

// pickerModel is a one-choice list.
type pickerModel struct {
	title  string
	items  []string
	cursor int
	chosen int
	height int
}

// Init does nothing: the list waits for keys.
func (m pickerModel) Init() tea.Cmd { return nil }

// Update moves the cursor, chooses, or leaves the list.
func (m pickerModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.height = msg.Height
	case tea.KeyMsg:
		// By type, or one typed letter: a burst of text ("enter") is no key.
		letter := func(r rune) bool { return msg.Type == tea.KeyRunes && len(msg.Runes) == 1 && msg.Runes[0] == r }
		switch {
		case msg.Type == tea.KeyUp || msg.Type == tea.KeyCtrlP || letter('k'):
			if m.cursor > 0 {
				m.cursor--
			}
		case msg.Type == tea.KeyDown || msg.Type == tea.KeyCtrlN || letter('j'):
			if m.cursor < len(m.items)-1 {
				m.cursor++
			}
		case msg.Type == tea.KeyEnter:
			m.chosen = m.cursor
			return m, tea.Quit
		case msg.Type == tea.KeyEsc || msg.Type == tea.KeyCtrlC || letter('q'):
			return m, tea.Quit
		}
	}
	return m, nil
}

var (
	pickTitle  = lipgloss.NewStyle().Bold(true)
	pickCursor = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	dim        = lipgloss.NewStyle().Faint(true)
)

// View is the title and the list, the chosen line marked; nothing once
// a line is chosen.
func (m pickerModel) View() string {
	if m.chosen >= 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(pickTitle.Render(m.title) + "\n\n")
	// Show a window of the list around the cursor when it is taller than the screen.
	first, rows := 0, len(m.items)
	if m.height > 6 && rows > m.height-5 {
		rows = m.height - 5
		first = max(0, min(m.cursor-rows/2, len(m.items)-rows))
	}
	for i := first; i < first+rows; i++ {
		if i == m.cursor {
			b.WriteString(pickCursor.Render("▸ "+m.items[i]) + "\n")
		} else {
			b.WriteString("  " + m.items[i] + "\n")
		}
	}
	b.WriteString("\n" + dim.Render("↑/↓ choose · Enter opens · q quits") + "\n")
	return b.String()
}

// sessionLabel names a session in the chat's header; a session the first
// message is to create is "new session".
func sessionLabel(s store.Session) string {
	switch {
	case s.Title != "":
		return s.Title
	case s.ID != "":
		return s.ID
	}
	return "new session"
}
