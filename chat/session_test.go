package chat

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// A new session is titled from the first line of the human's first
// message with text, cut at a word to at most 60 characters.
func TestChatSessionTitle(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 9, 30, 0, 0, time.UTC)
	cases := []struct{ name, text, want string }{
		{"short", "plan the login page", "plan the login page"},
		{"first line, trimmed", "  plan the login page  \nwith SSO\n", "plan the login page"},
		{"lines without text skipped", "\n---\n  find auth\n", "find auth"},
		{"blanks and control characters", "plan\tthe\x00  login\r\n", "plan the login"},
		{"exactly 60", strings.Repeat("abcde ", 9) + "abcde", strings.Repeat("abcde ", 9) + "abcde"},
		{"cut at a word", "plan the login page for the mobile app, with SSO and passwordless sign-in options",
			"plan the login page for the mobile app, with SSO and…"},
		{"cut at a space after a comma", "Write the rollout plan for the new billing service: phases, owners, risks",
			"Write the rollout plan for the new billing service: phases…"},
		{"one long word", strings.Repeat("a", 80), strings.Repeat("a", 59) + "…"},
		{"characters, not bytes", strings.Repeat("é", 61), strings.Repeat("é", 59) + "…"},
		{"empty", "", "Chat 2025-06-01 09:30"},
		{"blank", "  \n\t\n", "Chat 2025-06-01 09:30"},
		{"no letter or digit", "???\n---", "Chat 2025-06-01 09:30"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := sessionTitle(c.text, now)
			if got != c.want {
				t.Fatalf("sessionTitle(%q) = %q, want %q", c.text, got, c.want)
			}
			if n := utf8.RuneCountInString(got); n > maxTitle {
				t.Fatalf("sessionTitle(%q) has %d characters", c.text, n)
			}
		})
	}
}

// sessionConn is a planner connection that records the session each
// message was sent to.
type sessionConn struct {
	mu    sync.Mutex
	sent  []string // "session text"
	turns []string
}

func (c *sessionConn) SendMultitask(_ context.Context, session, text, turn, _ string) (rpcclient.SendResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, session+" "+text)
	c.turns = append(c.turns, turn)
	return rpcclient.SendResult{Turn: turn}, nil
}

func (c *sessionConn) Cancel(context.Context, string, string) error { return nil }

func (c *sessionConn) got() ([]string, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sent), slices.Clone(c.turns)
}

// fakeOpener opens session s-new, whose outputs come from feed: its first
// fail calls fail, and with gate set each call waits for it to close.
type fakeOpener struct {
	mu     sync.Mutex
	fail   int
	gate   chan struct{}
	feed   chan rpcclient.Output
	firsts []string // the first message of each call
}

func (f *fakeOpener) open(ctx context.Context, first string) (store.Session, watchFeed, error) {
	f.mu.Lock()
	f.firsts = append(f.firsts, first)
	fail := f.fail > 0
	f.fail--
	f.mu.Unlock()
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return store.Session{}, nil, ctx.Err()
		}
	}
	if fail {
		return store.Session{}, nil, errors.New("chat: create a session in DEMO: the api is down")
	}
	return store.Session{ID: "s-new", Project: "DEMO", Title: sessionTitle(first, time.Now())}, fakeFeed{ch: f.feed}, nil
}

func (f *fakeOpener) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.firsts)
}

// A new chat creates its session with the first message sent, titled from
// it, and sends every message to it; quit before, it creates none.
func TestChatScreenOpensSessionOnFirstMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// fail: the first opens fail; gate: the open waits until every
		// message is typed.
		fail  int
		gate  bool
		typed []string
		// opens: the first message of each open; sent: "session text".
		opens, sent []string
		shows       []string
	}{
		{name: "quit before a message", shows: []string{"ballet chat · DEMO · new session"}},
		{name: "the first message opens the session", typed: []string{"plan the login page\nwith SSO"},
			opens: []string{"plan the login page\nwith SSO"}, sent: []string{"s-new plan the login page\nwith SSO"},
			shows: []string{"ballet chat · DEMO · plan the login page", "you › plan the login page", "Here is a plan."}},
		{name: "messages typed while it opens follow in order", gate: true,
			typed: []string{"plan the login page", "and the logout page"},
			opens: []string{"plan the login page"}, sent: []string{"s-new plan the login page", "s-new and the logout page"},
			shows: []string{"ballet chat · DEMO · plan the login page", "you › and the logout page", "Here is a plan."}},
		{name: "a failed open says why and the next message tries again", fail: 1,
			typed: []string{"plan the login page", "draft the roadmap"},
			opens: []string{"plan the login page", "draft the roadmap"}, sent: []string{"s-new draft the roadmap"},
			shows: []string{"ballet chat · DEMO · draft the roadmap",
				"✗ not sent: chat: create a session in DEMO: the api is down", "Here is a plan."}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn := &sessionConn{}
			r := &screenRun{t: t, feed: make(chan rpcclient.Output), msgs: make(chan tea.Msg, 1024), stop: make(chan struct{})}
			t.Cleanup(func() { close(r.stop) })
			o := &fakeOpener{fail: c.fail, feed: r.feed}
			if c.gate {
				o.gate = make(chan struct{})
			}
			r.m = newModel(t.Context(), conn, nil, nil, nil, newSessionTarget(store.Project{Key: "DEMO"}), o.open)
			r.update(tea.WindowSizeMsg{Width: 100, Height: 60})
			for i, text := range c.typed {
				r.typeMessage(text)
				if i < c.fail {
					r.until("the open to fail", func() bool { return strings.Contains(r.screen(), "✗ not sent") })
				}
			}
			if c.gate {
				r.until("the open to wait", func() bool { return len(o.calls()) == 1 })
				close(o.gate)
			}
			r.until("the messages to be sent", func() bool { sent, _ := conn.got(); return len(sent) >= len(c.sent) })
			if _, turns := conn.got(); len(turns) > 0 {
				answer := []byte(`[{"type":"text","text":"Here is a plan."}]`)
				r.output(rpcclient.Output{Turn: turns[0], Type: store.OutputMessage, Role: "assistant", Content: answer})
				r.until("the answer", func() bool { return strings.Contains(r.screen(), "Here is a plan.") })
			}
			sent, _ := conn.got()
			if opens := o.calls(); !slices.Equal(opens, c.opens) {
				t.Errorf("opened the session for %q, want %q", opens, c.opens)
			}
			if !slices.Equal(sent, c.sent) {
				t.Errorf("sent %q, want %q", sent, c.sent)
			}
			expectScreen(t, r.screen(), c.shows, nil)
			if len(c.typed) == 0 {
				if _, cmd := r.m.Update(tea.KeyMsg{Type: tea.KeyCtrlC}); cmd == nil || cmd() != tea.Quit() {
					t.Fatal("Ctrl-C before a message did not quit")
				}
			}
		})
	}
}
