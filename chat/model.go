package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/spinner"
	"github.com/charmbracelet/bubbles/textarea"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/google/uuid"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// quitWindow is how soon a second Ctrl-C must follow the first to quit
// while a turn runs.
const quitWindow = 2 * time.Second

// Messages the chat model receives besides keys and sizes.
type (
	outputMsg    rpcclient.Output
	watchEndMsg  struct{ err error }
	stateMsg     rpcclient.State
	cancelMsg    struct{ err error }
	humanTextMsg struct{ turn, text string }
)

// model is the chat screen: the transcript, a status line and the composer.
type model struct {
	ctx      context.Context
	conn     plannerConn
	rest     *restClient // loads the text of turns another client sent
	outputs  <-chan rpcclient.Output
	watchErr func() error
	states   <-chan rpcclient.State
	tgt      target

	width, height int
	vp            viewport.Model
	ta            textarea.Model
	spin          spinner.Model
	md            *markdown

	tr            transcript
	live          store.LiveText  // the running round's text, stitched from text outputs
	open          map[string]bool // turns queued or running
	running       string          // the turn that started and is not done
	state         rpcclient.State
	lastInterrupt time.Time
	notice        string

	// out holds the messages typed here that the server has not taken yet.
	out outbox
	// retryBase is the first wait before a failed send is tried again
	// (sendRetryBase when 0).
	retryBase time.Duration
	// opener creates and watches the session of a new chat when the first
	// message goes (nil for an existing session); opening says it runs.
	opener  sessionOpener
	opening bool
	// startup holds the commands the history asked for, run by Init.
	startup []tea.Cmd
}

// watchFeed is what the chat screen reads of a watch.
type watchFeed interface {
	Outputs() <-chan rpcclient.Output
	Err() error
}

// newModel is the chat screen of tgt, whose outputs w delivers; w is
// nil for a new session, which opener creates.
func newModel(ctx context.Context, conn plannerConn, rest *restClient, w watchFeed,
	states <-chan rpcclient.State, tgt target, opener sessionOpener) model {
	ta := textarea.New()
	ta.Placeholder = "Message the planner (Enter sends, Alt+Enter new line)"
	ta.ShowLineNumbers = false
	ta.CharLimit = 100000
	ta.SetHeight(3)
	ta.KeyMap.InsertNewline = key.NewBinding(key.WithKeys("alt+enter", "ctrl+j"))
	ta.Focus()
	sp := spinner.New(spinner.WithSpinner(spinner.Dot))
	m := model{ctx: ctx, conn: conn, rest: rest, states: states, tgt: tgt, opener: opener,
		ta: ta, spin: sp, md: newMarkdown(), vp: viewport.New(80, 20), open: map[string]bool{},
		tr: newTranscript(), state: rpcclient.Connected}
	if w != nil {
		m.outputs, m.watchErr = w.Outputs(), w.Err
	}
	m.applyHistory(tgt.history)
	m.tgt.history = nil
	return m
}

// Init starts the cursor, the spinner, the watch, the connection state
// and the commands the history asked for.
func (m model) Init() tea.Cmd {
	cmds := []tea.Cmd{textarea.Blink, m.spin.Tick, waitOutput(m.outputs, m.watchErr), waitState(m.states)}
	return tea.Batch(append(cmds, m.startup...)...)
}

func waitOutput(ch <-chan rpcclient.Output, errf func() error) tea.Cmd {
	if ch == nil {
		return nil // no session yet
	}
	return func() tea.Msg {
		o, ok := <-ch
		if !ok {
			return watchEndMsg{err: errf()}
		}
		return outputMsg(o)
	}
}

func waitState(ch <-chan rpcclient.State) tea.Cmd {
	if ch == nil {
		return nil
	}
	return func() tea.Msg {
		s, ok := <-ch
		if !ok {
			return stateMsg(rpcclient.Closed)
		}
		return stateMsg(s)
	}
}

// Update takes a key, a resize, an output or the result of a command.
func (m model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmds []tea.Cmd
	// Whether the newest lines are in view is decided before anything
	// changes: a resize changes the viewport's height and the transcript's
	// wrapping, and must not lose the bottom.
	follow := m.following()
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
	case tea.KeyMsg:
		// Keys are matched by type, never by spelling: text that arrives in
		// a burst (a paste without bracketed paste, a slow link, tmux
		// send-keys) is one KeyRunes message whose String() may read
		// "enter" or "down", and it is text.
		switch {
		case msg.Type == tea.KeyRunes && !msg.Alt:
			m.ta.InsertString(string(msg.Runes))
		case msg.Type == tea.KeyCtrlC:
			return m.interrupt()
		case msg.Type == tea.KeyEnter && !msg.Alt:
			cmds = append(cmds, m.send())
		case msg.Type == tea.KeyPgUp || msg.Type == tea.KeyPgDown:
			var cmd tea.Cmd
			m.vp, cmd = m.vp.Update(msg)
			return m, cmd
		default:
			var cmd tea.Cmd
			m.ta, cmd = m.ta.Update(msg)
			cmds = append(cmds, cmd)
		}
	case spinner.TickMsg:
		var cmd tea.Cmd
		m.spin, cmd = m.spin.Update(msg)
		if len(m.open) == 0 {
			return m, cmd // nothing spins
		}
		cmds = append(cmds, cmd)
	case outputMsg:
		cmds = append(cmds, m.apply(rpcclient.Output(msg)), waitOutput(m.outputs, m.watchErr))
	case watchEndMsg:
		m.notice = "the session's watch ended"
		if msg.err != nil {
			m.notice += ": " + msg.err.Error()
		}
	case stateMsg:
		m.state = rpcclient.State(msg)
		if m.state != rpcclient.Closed {
			cmds = append(cmds, waitState(m.states))
		}
	case sentMsg:
		cmds = append(cmds, m.sent(msg))
	case resendMsg:
		cmds = append(cmds, m.resend(msg))
	case openedMsg:
		cmds = append(cmds, m.opened(msg))
	case cancelMsg:
		if msg.err != nil {
			m.notice = "cancel failed: " + msg.err.Error()
		}
	case humanTextMsg:
		m.tr.setHuman(msg.turn, msg.text)
	case changesetMsg:
		m.loaded(msg)
	case decidedMsg:
		m.decided(msg)
	default:
		var cmd tea.Cmd
		m.ta, cmd = m.ta.Update(msg)
		cmds = append(cmds, cmd)
	}
	m.refresh(follow)
	return m, tea.Batch(cmds...)
}

// interrupt cancels the running turn, or quits when nothing runs (no
// session yet either) or when it follows another Ctrl-C closely.
func (m model) interrupt() (tea.Model, tea.Cmd) {
	now := time.Now()
	if len(m.open) == 0 || m.tgt.session.ID == "" || now.Sub(m.lastInterrupt) < quitWindow {
		return m, tea.Quit
	}
	m.lastInterrupt = now
	m.notice = "cancelling… (Ctrl-C again to quit)"
	conn, session, turn := m.conn, m.tgt.session.ID, m.running
	ctx := m.ctx
	m.refresh(m.following())
	return m, func() tea.Msg {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return cancelMsg{err: conn.Cancel(cctx, session, turn)}
	}
}

// send sends the composer's text as a new turn, after the messages typed
// before it; a command (see commands) runs here instead.
func (m *model) send() tea.Cmd {
	text := strings.TrimSpace(m.ta.Value())
	if text == "" {
		return nil
	}
	m.ta.Reset()
	multitask := ""
	if name, args, ok := parseCommand(text); ok && name == "/interrupt" && args != "" {
		text, multitask = args, store.MultitaskInterrupt
	} else if ok {
		return m.command(name, args)
	}
	turn := uuid.NewString()
	m.open[turn] = true
	m.tr.human(turn, text)
	m.notice = ""
	return m.queueSend(turn, text, multitask)
}

// apply adds an output to the transcript.
func (m *model) apply(o rpcclient.Output) tea.Cmd {
	var cmd tea.Cmd
	changed := m.live.Add(store.Output{Turn: o.Turn, Type: o.Type, Cursor: o.Cursor, Text: o.Text,
		Attempt: o.Attempt, TextAfter: o.TextAfter, TextEnd: o.TextEnd})
	switch o.Type {
	case store.OutputText:
		if changed {
			m.tr.stream(o.Turn, m.live.Text())
		}
	case store.OutputMessage:
		if o.Role == "assistant" {
			m.tr.answer(o.Turn, blocksText(o.Content))
		}
	case store.OutputToolCall:
		m.tr.toolCall(o.Turn, o.ToolUseID, o.Tool, compactJSON(o.Input))
	case store.OutputToolResult:
		m.tr.toolResult(o.Turn, o.ToolUseID, o.Tool, o.IsError, firstLine(o.Text))
		if id := proposedChangeset(o); id != "" {
			cmd = m.showChangeset(o.Turn, id)
		}
	case store.OutputQueued:
		m.open[o.Turn] = true
		if !m.tr.shown(o.Turn) {
			cmd = m.showHuman(o)
		}
		if o.Position != nil && *o.Position > 0 {
			m.tr.note(o.Turn, fmt.Sprintf("queued (position %d)", *o.Position))
		}
	case store.OutputStarted:
		m.open[o.Turn] = true
		m.running = o.Turn
	case store.OutputCompacted:
		m.tr.note(o.Turn, "earlier messages were summarized")
	case store.OutputError:
		m.tr.note(o.Turn, "error: "+o.Text)
	case store.OutputDone:
		delete(m.open, o.Turn)
		if m.running == o.Turn {
			m.running = ""
		}
		m.tr.done(o.Turn, o.Text)
		if len(m.open) == 0 {
			m.notice = ""
		}
	}
	return cmd
}

// showHuman shows the human's message of a turn seen first by its queued
// output, which carries it; for a server that does not send it, the text
// comes from the session loaded at the start or, for a turn sent since,
// from the REST API.
func (m *model) showHuman(o rpcclient.Output) tea.Cmd {
	if text := blocksText(o.Content); text != "" {
		m.tr.human(o.Turn, text)
		return nil
	}
	text, known := m.tgt.human[o.Turn]
	m.tr.human(o.Turn, text)
	if known || m.rest == nil {
		return nil
	}
	return m.loadHuman(o.Turn)
}

// loadHuman fetches the text of a turn sent by another client.
func (m *model) loadHuman(turn string) tea.Cmd {
	rest, ctx, id := m.rest, m.ctx, m.tgt.session.ID
	return func() tea.Msg {
		s, err := rest.session(ctx, id)
		if err != nil {
			return humanTextMsg{turn: turn, text: "(message not loaded: " + err.Error() + ")"}
		}
		return humanTextMsg{turn: turn, text: humanTexts(s)[turn]}
	}
}

func compactJSON(raw json.RawMessage) string {
	var b strings.Builder
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}

var (
	headerStyle = lipgloss.NewStyle().Bold(true)
	bannerStyle = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("1"))
)

// layout sizes the parts to the window.
func (m *model) layout() {
	m.ta.SetWidth(max(m.width, 10))
	m.vp.Width = max(m.width, 10)
	m.vp.Height = max(m.height-1-1-m.ta.Height(), 1)
}

// following says whether the newest lines are in view: the human did not
// scroll up.
func (m *model) following() bool {
	return m.vp.AtBottom() || m.vp.TotalLineCount() <= m.vp.Height
}

// refresh renders the transcript into the viewport, and shows its end when
// follow (see following, taken before the change).
func (m *model) refresh(follow bool) {
	m.vp.SetContent(m.tr.render(max(m.width, 10), m.md, strings.TrimSpace(m.spin.View())))
	if follow {
		m.vp.GotoBottom()
	}
}

func (m model) status() string {
	switch {
	case m.state == rpcclient.Closed:
		return bannerStyle.Render(" connection closed ")
	case m.state != rpcclient.Connected:
		return bannerStyle.Render(" disconnected — reconnecting… ")
	case m.notice != "":
		return m.notice
	case len(m.open) > 0:
		return m.spin.View() + "answering · Ctrl-C cancels"
	}
	return dim.Render("Enter sends · Alt+Enter new line · PgUp/PgDn scroll · /help · Ctrl-C quits")
}

// View is the header, the transcript, the status line and the composer.
func (m model) View() string {
	header := headerStyle.Render(fmt.Sprintf("ballet chat · %s · %s", m.tgt.project.Key, sessionLabel(m.tgt.session)))
	return header + "\n" + m.vp.View() + "\n" + m.status() + "\n" + m.ta.View()
}
