package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// fakeConn records what the chat screen sends and cancels.
type fakeConn struct {
	mu        sync.Mutex
	sent      []string
	turns     []string // the turn id of each of sent
	multitask []string // the multitask of each of sent
	cancelled []string
}

func (f *fakeConn) SendMultitask(_ context.Context, _, text, turn, multitask string) (rpcclient.SendResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, text)
	f.turns = append(f.turns, turn)
	f.multitask = append(f.multitask, multitask)
	return rpcclient.SendResult{Turn: turn}, nil
}

func (f *fakeConn) Cancel(_ context.Context, _, turn string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, turn)
	return nil
}

type fakeFeed struct{ ch chan rpcclient.Output }

func (f fakeFeed) Outputs() <-chan rpcclient.Output { return f.ch }
func (f fakeFeed) Err() error                       { return nil }

func newTestScreen(t *testing.T) (model, *fakeConn) {
	t.Helper()
	conn := &fakeConn{}
	tgt := target{project: store.Project{Key: "DEMO"}, session: store.Session{ID: "s1", Title: "Plan"},
		human: map[string]string{"t1": "find auth"}}
	m := newModel(context.Background(), conn, nil, fakeFeed{ch: make(chan rpcclient.Output)}, nil, tgt, nil)
	next, _ := m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	return next.(model), conn
}

func feed(m model, msgs ...tea.Msg) model {
	for _, msg := range msgs {
		next, _ := m.Update(msg)
		m = next.(model)
	}
	return m
}

func pos(n int64) *int64 { return &n }

// The screen shows each kind of output as a human should read it.
func TestChatScreenShowsOutputs(t *testing.T) {
	t.Parallel()
	answer, _ := json.Marshal([]store.Block{{Type: "text", Text: "A **bold** plan"}})
	cases := []struct {
		name      string
		msgs      []tea.Msg
		want, not []string
	}{
		{"transcript", []tea.Msg{
			outputMsg{Turn: "t1", Type: "queued", Position: pos(0)},
			outputMsg{Turn: "t1", Type: "started"},
			outputMsg{Turn: "t1", Type: "text", Text: "A **bo"},
			outputMsg{Turn: "t1", Type: "message", Role: "assistant", Content: answer},
			outputMsg{Turn: "t1", Type: "tool_call", Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{"query":"auth"}`)},
		}, []string{"you › find auth", "A bold plan", `⟳ search_project {"query":"auth"}`, "answering"}, []string{"**", "queued"}},
		{"done", []tea.Msg{
			outputMsg{Turn: "t1", Type: "queued", Position: pos(0)},
			outputMsg{Turn: "t1", Type: "message", Role: "assistant", Content: answer},
			outputMsg{Turn: "t1", Type: "done", Text: "end_turn"},
		}, []string{"A bold plan", "Enter sends"}, []string{"end_turn", "answering"}},
		{"cancelled", []tea.Msg{
			outputMsg{Turn: "t1", Type: "started"},
			outputMsg{Turn: "t1", Type: "tool_call", Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{}`)},
			outputMsg{Turn: "t1", Type: "done", Text: "cancelled"},
		}, []string{"✗ search_project: cancelled", "— cancelled", "Enter sends"}, []string{"⟳"}},
		{"tool running then failed", []tea.Msg{
			outputMsg{Turn: "t1", Type: "tool_call", Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{}`)},
			outputMsg{Turn: "t1", Type: "tool_result", Tool: "search_project", ToolUseID: "u1", IsError: true, Text: "boom\nmore"},
		}, []string{"✗ search_project: boom"}, []string{"⟳", "more"}},
		{"tool ok", []tea.Msg{
			outputMsg{Turn: "t1", Type: "tool_call", Tool: "read_skill", ToolUseID: "u1", Input: json.RawMessage(`{}`)},
			outputMsg{Turn: "t1", Type: "tool_result", Tool: "read_skill", ToolUseID: "u1", Text: "skill"},
		}, []string{"✓ read_skill"}, []string{"⟳"}},
		{"queued behind another", []tea.Msg{outputMsg{Turn: "t2", Type: "queued", Position: pos(2)}},
			[]string{"queued (position 2)", "answering · Ctrl-C cancels"}, nil},
		{"stopped", []tea.Msg{
			outputMsg{Turn: "t1", Type: "error", Text: "the model failed"},
			outputMsg{Turn: "t1", Type: "done", Text: "max_rounds"},
		}, []string{"error: the model failed", "— stopped: max_rounds", "Enter sends"}, nil},
		{"a takeover's text replaces the stale worker's", []tea.Msg{
			outputMsg{Turn: "t1", Type: "started", Cursor: 2},
			outputMsg{Turn: "t1", Type: "text", Attempt: 100, TextAfter: 2, TextEnd: 15, Text: "Writing a note."},
			outputMsg{Turn: "t1", Type: "text", Attempt: 200, TextAfter: 2, TextEnd: 8, Text: "Recorded"},
			outputMsg{Turn: "t1", Type: "text", Attempt: 100, TextAfter: 2, TextEnd: 21, Text: " More."},
		}, []string{"Recorded"}, []string{"Writing", "More"}},
		{"a resume snapshot is placed, not appended", []tea.Msg{
			outputMsg{Turn: "t1", Type: "started", Cursor: 2},
			outputMsg{Turn: "t1", Type: "text", Attempt: 100, TextAfter: 2, TextEnd: 7, Text: "Writing"},
			outputMsg{Turn: "t1", Type: "text", Attempt: 100, TextAfter: 2, TextEnd: 15, Text: "Writing a note."},
			outputMsg{Turn: "t1", Type: "text", Attempt: 100, TextAfter: 2, TextEnd: 15, Text: " a note."},
		}, []string{"Writing a note."}, []string{"WritingWriting", "a note. a note."}},
		{"disconnected", []tea.Msg{stateMsg(rpcclient.Reconnecting)}, []string{"disconnected — reconnecting…"}, nil},
		{"reconnected", []tea.Msg{stateMsg(rpcclient.Disconnected), stateMsg(rpcclient.Connected)},
			[]string{"Enter sends"}, []string{"disconnected"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newTestScreen(t)
			expectScreen(t, screenText(feed(m, c.msgs...).View()), c.want, c.not)
		})
	}
}

// expectScreen fails t unless the screen shows every text of want and
// none of not.
func expectScreen(t *testing.T, screen string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(screen, w) {
			t.Errorf("the screen lacks %q:\n%s", w, screen)
		}
	}
	for _, n := range not {
		if strings.Contains(screen, n) {
			t.Errorf("the screen shows %q:\n%s", n, screen)
		}
	}
}

// Ctrl-C cancels the running turn, a second one quits; with nothing
// running the first one quits.
func TestChatScreenCtrlC(t *testing.T) {
	t.Parallel()
	m, conn := newTestScreen(t)
	ctrlC := tea.KeyMsg{Type: tea.KeyCtrlC}
	if _, cmd := m.Update(ctrlC); cmd == nil || cmd() != tea.Quit() {
		t.Fatal("Ctrl-C with nothing running did not quit")
	}
	m = feed(m, outputMsg{Turn: "t1", Type: "queued", Position: pos(0)}, outputMsg{Turn: "t1", Type: "started"})
	next, cmd := m.Update(ctrlC)
	m = next.(model)
	if cmd == nil {
		t.Fatal("Ctrl-C while a turn runs did nothing")
	}
	if msg := cmd(); msg == tea.Quit() {
		t.Fatal("the first Ctrl-C quit")
	}
	if len(conn.cancelled) != 1 || conn.cancelled[0] != "t1" || !strings.Contains(m.View(), "cancelling…") {
		t.Fatalf("cancelled %v; screen:\n%s", conn.cancelled, m.View())
	}
	if _, cmd := m.Update(ctrlC); cmd == nil || cmd() != tea.Quit() {
		t.Fatal("a second Ctrl-C did not quit")
	}
}

// Enter sends the composer's text; Alt+Enter makes a new line instead.
func TestChatScreenComposer(t *testing.T) {
	t.Parallel()
	m, conn := newTestScreen(t)
	for _, r := range "first" {
		m = feed(m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	m = feed(m, tea.KeyMsg{Type: tea.KeyEnter, Alt: true})
	for _, r := range "second" {
		m = feed(m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	next, cmd := m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	m = next.(model)
	if cmd == nil {
		t.Fatal("Enter sent nothing")
	}
	drain(cmd)
	if len(conn.sent) != 1 || conn.sent[0] != "first\nsecond" {
		t.Fatalf("sent %q", conn.sent)
	}
	if screen := screenText(m.View()); !strings.Contains(screen, "you › first\n      second") || !strings.Contains(screen, "answering") {
		t.Fatalf("screen:\n%s", screen)
	}
	if next, _ := m.Update(tea.KeyMsg{Type: tea.KeyEnter}); len(conn.sent) != 1 || next.(model).ta.Value() != "" {
		t.Fatalf("an empty composer sent %q", conn.sent)
	}
}

// Text that arrives in a burst (a paste without bracketed paste, tmux
// send-keys, a slow link) is one KeyRunes message; words that spell key
// names are text, not keys.
func TestChatScreenTakesBurstsAsText(t *testing.T) {
	t.Parallel()
	m, conn := newTestScreen(t)
	for _, burst := range []string{"enter", " ", "down", " up home end ", "pgdown", " ctrl+c"} {
		m = feed(m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(burst)})
	}
	if got, want := m.ta.Value(), "enter down up home end pgdown ctrl+c"; got != want || len(conn.sent) != 0 {
		t.Fatalf("composer %q (want %q), sent %q", got, want, conn.sent)
	}
	next, cmd := m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	drain(cmd)
	if len(conn.sent) != 1 || conn.sent[0] != "enter down up home end pgdown ctrl+c" || next.(model).ta.Value() != "" {
		t.Fatalf("sent %q", conn.sent)
	}
}

// screenText is a view as a terminal shows it: without escape sequences
// and trailing blanks.
func screenText(view string) string {
	lines := strings.Split(ansi.Strip(view), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// drain runs a command and the commands of the batch it may return.
func drain(cmd tea.Cmd) {
	if b, ok := cmd().(tea.BatchMsg); ok {
		for _, c := range b {
			if c != nil {
				drain(c)
			}
		}
	}
}

// The session picker moves on keys and single letters, and takes no burst
// of text for a key.
func TestPickerTakesKeysByType(t *testing.T) {
	t.Parallel()
	m := tea.Model(pickerModel{items: []string{"a", "b", "c"}, chosen: -1})
	for _, msg := range []tea.KeyMsg{
		{Type: tea.KeyRunes, Runes: []rune("j")},
		{Type: tea.KeyDown},
		{Type: tea.KeyRunes, Runes: []rune("enter")}, // a burst: no choice
		{Type: tea.KeyRunes, Runes: []rune("kq")},    // nor these
	} {
		m, _ = m.Update(msg)
	}
	if p := m.(pickerModel); p.cursor != 2 || p.chosen != -1 {
		t.Fatalf("cursor %d, chosen %d; want 2, -1", p.cursor, p.chosen)
	}
	m, _ = m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if p := m.(pickerModel); p.chosen != 2 {
		t.Fatalf("chosen %d, want 2", p.chosen)
	}
}

// A resize keeps the newest lines in view when they were; a transcript
// scrolled up stays where it was.
func TestChatScreenResizeKeepsNewestInView(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		scrolled  bool
		size      tea.WindowSizeMsg
		want, not []string
	}{
		{"lower", false, tea.WindowSizeMsg{Width: 100, Height: 15}, []string{"answer 29 with words"}, nil},
		{"narrower", false, tea.WindowSizeMsg{Width: 30, Height: 30}, []string{"answer 29 with"}, nil},
		{"narrower and lower", false, tea.WindowSizeMsg{Width: 30, Height: 12}, []string{"answer 29 with"}, nil},
		{"higher", false, tea.WindowSizeMsg{Width: 100, Height: 50}, []string{"answer 29 with words"}, nil},
		{"scrolled up", true, tea.WindowSizeMsg{Width: 100, Height: 15}, nil, []string{"answer 29"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newTestScreen(t) // 100×30
			for i := range 30 {
				turn := fmt.Sprintf("t%d", i)
				m = feed(m, queuedOf(turn, fmt.Sprintf("question %d", i), 0),
					answerOf(turn, fmt.Sprintf("answer %d with words enough to wrap on a narrow screen", i)),
					outputMsg{Turn: turn, Type: store.OutputDone, Text: store.ReasonEndTurn})
			}
			expectScreen(t, screenText(m.View()), []string{"answer 29 with words"}, nil)
			if c.scrolled {
				m = feed(m, tea.KeyMsg{Type: tea.KeyPgUp}, tea.KeyMsg{Type: tea.KeyPgUp})
			}
			expectScreen(t, screenText(feed(m, c.size).View()), c.want, c.not)
		})
	}
}
