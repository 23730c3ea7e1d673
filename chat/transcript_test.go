package chat

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// textBlocks is a message's content of one text block.
func textBlocks(text string) json.RawMessage {
	b, _ := json.Marshal([]store.Block{{Type: store.BlockText, Text: text}})
	return b
}

// queuedOf is the queued output of a turn, carrying its human's message.
func queuedOf(turn, text string, position int64) outputMsg {
	return outputMsg{Turn: turn, Type: store.OutputQueued, Position: pos(position), Role: "user", Content: textBlocks(text)}
}

func answerOf(turn, text string) outputMsg {
	return outputMsg{Turn: turn, Type: store.OutputMessage, Role: "assistant", Content: textBlocks(text)}
}

// wantInOrder fails t unless screen shows each of want, each after the one
// before it.
func wantInOrder(t *testing.T, screen string, want []string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(screen[at:], w)
		if i < 0 {
			t.Fatalf("the screen lacks %q after %q:\n%s", w, screen[:at], screen)
		}
		at += i + len(w)
	}
}

// Each turn is a block of its own in the order the turns were queued: its
// human's message, its answers, tool lines and notes stay together however
// the server interleaves the outputs of a running turn with those of the
// turns queued behind it, live and replayed.
func TestChatScreenKeepsTurnsTogether(t *testing.T) {
	t.Parallel()
	// The running turn a, and b queued behind it while it runs.
	running := []tea.Msg{
		queuedOf("a", "plan the login page", 0),
		outputMsg{Turn: "a", Type: store.OutputStarted, Cursor: 2},
		outputMsg{Turn: "a", Type: store.OutputText, Text: "Let me look"},
		queuedOf("b", "and the signup page", 1),
		outputMsg{Turn: "a", Type: store.OutputText, Text: " at the plan."},
		answerOf("a", "Let me look at the plan."),
		outputMsg{Turn: "a", Type: store.OutputToolCall, Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{}`)},
	}
	cases := []struct {
		name string
		msgs []tea.Msg
		want []string
	}{
		{"a queued turn cancelled while another runs", append(append([]tea.Msg{}, running...),
			outputMsg{Turn: "b", Type: store.OutputDone, Text: store.ReasonCancelled},
			outputMsg{Turn: "a", Type: store.OutputToolResult, Tool: "search_project", ToolUseID: "u1", Text: "found"},
			answerOf("a", "The login page needs a form."),
			outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonEndTurn},
		), []string{"you › plan the login page", "Let me look at the plan.", "✓ search_project", "The login page needs a form.",
			"you › and the signup page", "queued (position 1)", "— cancelled"}},
		{"Stop: the waiting turns end first, then the running one", append(append([]tea.Msg{}, running...),
			queuedOf("c", "and the logout", 2),
			outputMsg{Turn: "b", Type: store.OutputDone, Text: store.ReasonCancelled},
			outputMsg{Turn: "c", Type: store.OutputDone, Text: store.ReasonCancelled},
			outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonCancelled},
		), []string{"you › plan the login page", "Let me look at the plan.", "search_project", "— cancelled",
			"you › and the signup page", "— cancelled", "you › and the logout", "— cancelled"}},
		{"both answered, replayed from the history", []tea.Msg{
			outputMsg{Turn: "a", Type: store.OutputQueued, Cursor: 1, Position: pos(0), Role: "user", Content: textBlocks("plan the login page")},
			outputMsg{Turn: "a", Type: store.OutputStarted, Cursor: 2},
			outputMsg{Turn: "b", Type: store.OutputQueued, Cursor: 3, Position: pos(1), Role: "user", Content: textBlocks("and the signup page")},
			outputMsg{Turn: "a", Type: store.OutputMessage, Cursor: 4, Role: "assistant", Content: textBlocks("Let me look at the plan.")},
			outputMsg{Turn: "a", Type: store.OutputToolCall, Cursor: 5, Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{}`)},
			outputMsg{Turn: "a", Type: store.OutputToolResult, Cursor: 6, Tool: "search_project", ToolUseID: "u1", Text: "found"},
			outputMsg{Turn: "a", Type: store.OutputMessage, Cursor: 7, Role: "assistant", Content: textBlocks("The login page needs a form.")},
			outputMsg{Turn: "a", Type: store.OutputDone, Cursor: 8, Text: store.ReasonEndTurn},
			outputMsg{Turn: "b", Type: store.OutputStarted, Cursor: 9},
			outputMsg{Turn: "b", Type: store.OutputMessage, Cursor: 10, Role: "assistant", Content: textBlocks("The signup page needs one too.")},
			outputMsg{Turn: "b", Type: store.OutputDone, Cursor: 11, Text: store.ReasonEndTurn},
		}, []string{"you › plan the login page", "Let me look at the plan.", "✓ search_project", "The login page needs a form.",
			"you › and the signup page", "queued (position 1)", "The signup page needs one too."}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newTestScreen(t)
			// Known from the start too: this is about where they show.
			m.tgt.human = map[string]string{"a": "plan the login page", "b": "and the signup page", "c": "and the logout"}
			m = feed(m, append([]tea.Msg{tea.WindowSizeMsg{Width: 100, Height: 60}}, c.msgs...)...)
			wantInOrder(t, screenText(m.View()), c.want)
		})
	}
}

// A message typed here while a turn runs shows after that turn's whole
// output, with its own answer under it.
func TestChatScreenTypedWhileATurnRuns(t *testing.T) {
	t.Parallel()
	m, conn := newTestScreen(t)
	m.tgt.human = map[string]string{"a": "plan the login page"} // known from the start too
	m = feed(m, tea.WindowSizeMsg{Width: 100, Height: 60}, queuedOf("a", "plan the login page", 0),
		outputMsg{Turn: "a", Type: store.OutputStarted, Cursor: 2},
		outputMsg{Turn: "a", Type: store.OutputText, Text: "Let me look"},
		tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("and the signup page")})
	next, cmd := m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	m = next.(model)
	drain(cmd)
	if len(conn.turns) != 1 {
		t.Fatalf("sent %q", conn.sent)
	}
	b := conn.turns[0]
	m = feed(m,
		outputMsg{Turn: "a", Type: store.OutputText, Text: " at the plan."},
		answerOf("a", "Let me look at the plan."),
		outputMsg{Turn: "a", Type: store.OutputToolCall, Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{}`)},
		queuedOf(b, "and the signup page", 1),
		outputMsg{Turn: "a", Type: store.OutputToolResult, Tool: "search_project", ToolUseID: "u1", Text: "found"},
		answerOf("a", "The login page needs a form."),
		outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonEndTurn},
		outputMsg{Turn: b, Type: store.OutputStarted},
		answerOf(b, "The signup page needs one too."),
		outputMsg{Turn: b, Type: store.OutputDone, Text: store.ReasonEndTurn},
	)
	screen := screenText(m.View())
	wantInOrder(t, screen, []string{"you › plan the login page", "Let me look at the plan.", "✓ search_project",
		"The login page needs a form.", "you › and the signup page", "The signup page needs one too."})
	if n := strings.Count(screen, "you › and the signup page"); n != 1 {
		t.Fatalf("the typed message shows %d times:\n%s", n, screen)
	}
}

// The human's message of a turn is the one its queued output carries, for
// a message sent by another client and in a replayed history alike; the
// REST API is asked only for a queued output without it (an older server).
func TestChatScreenShowsQueuedMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		known map[string]string // the session's messages loaded at the start
		out   rpcclient.Output
		want  string
		loads int64
	}{
		{"sent by another client", nil,
			rpcclient.Output{Turn: "t9", Type: store.OutputQueued, Position: pos(0), Role: "user", Content: textBlocks("from the web")},
			"from the web", 0},
		{"replayed from the history", nil,
			rpcclient.Output{Turn: "t9", Type: store.OutputQueued, Cursor: 3, Seq: 5, Role: "user", Content: textBlocks("from the history")},
			"from the history", 0},
		{"an older server's, known from the start", map[string]string{"t9": "known at the start"},
			rpcclient.Output{Turn: "t9", Type: store.OutputQueued, Position: pos(0)}, "known at the start", 0},
		{"an older server's, sent since", nil,
			rpcclient.Output{Turn: "t9", Type: store.OutputQueued, Position: pos(0)}, "loaded over REST", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var loads atomic.Int64
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				loads.Add(1)
				_ = json.NewEncoder(w).Encode(store.Session{ID: "s1", Messages: []store.Message{
					{Role: "user", Turn: "t9", Content: []store.Block{{Type: store.BlockText, Text: "loaded over REST"}}}}})
			}))
			t.Cleanup(api.Close)
			known := c.known
			if known == nil {
				known = map[string]string{}
			}
			r := newScreenRun(t, &fakeConn{}, newRESTClient(api.URL, "token"), known)
			r.watch()
			r.output(c.out)
			r.until("the message, or the one loaded over REST", func() bool {
				s := r.screen()
				return strings.Contains(s, "you › "+c.want) || strings.Contains(s, "you › loaded over REST")
			})
			if s := r.screen(); !strings.Contains(s, "you › "+c.want) {
				t.Fatalf("the screen lacks %q:\n%s", "you › "+c.want, s)
			}
			if n := loads.Load(); n != c.loads {
				t.Fatalf("the session was loaded over REST %d times, want %d", n, c.loads)
			}
		})
	}
}

// A tool call still running when its turn ends shows how the turn ended,
// not a spinner for ever; another turn's end leaves it running.
func TestChatScreenEndsRunningTools(t *testing.T) {
	t.Parallel()
	call := outputMsg{Turn: "a", Type: store.OutputToolCall, Tool: "search_project", ToolUseID: "u1", Input: json.RawMessage(`{}`)}
	cases := []struct {
		name      string
		msgs      []tea.Msg
		want, not []string
	}{
		{"its turn cancelled", []tea.Msg{outputMsg{Turn: "a", Type: store.OutputStarted}, call,
			outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonCancelled}},
			[]string{"✗ search_project: cancelled", "— cancelled"}, []string{"⟳"}},
		{"its turn stopped by an error", []tea.Msg{outputMsg{Turn: "a", Type: store.OutputStarted}, call,
			outputMsg{Turn: "a", Type: store.OutputError, Text: "the model failed"},
			outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonError}},
			[]string{"✗ search_project: interrupted", "— stopped: error"}, []string{"⟳"}},
		{"a call that arrives after its turn ended", []tea.Msg{outputMsg{Turn: "a", Type: store.OutputStarted},
			outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonCancelled}, call},
			[]string{"✗ search_project: cancelled"}, []string{"⟳"}},
		{"Stop: the queued turn ends first, then its own", []tea.Msg{outputMsg{Turn: "a", Type: store.OutputStarted}, call,
			queuedOf("b", "next", 1), outputMsg{Turn: "b", Type: store.OutputDone, Text: store.ReasonCancelled},
			outputMsg{Turn: "a", Type: store.OutputDone, Text: store.ReasonCancelled}},
			[]string{"✗ search_project: cancelled"}, []string{"⟳"}},
		{"another turn's end", []tea.Msg{outputMsg{Turn: "a", Type: store.OutputStarted}, call,
			queuedOf("b", "next", 1), outputMsg{Turn: "b", Type: store.OutputDone, Text: store.ReasonCancelled}},
			[]string{"⟳ search_project {}"}, []string{"✗"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newTestScreen(t)
			expectScreen(t, screenText(feed(m, c.msgs...).View()), c.want, c.not)
		})
	}
}
