package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
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
			r := &chatRun{t: t, feed: make(chan rpcclient.Output), msgs: make(chan tea.Msg, 1024), stop: make(chan struct{})}
			t.Cleanup(func() { close(r.stop) })
			o := &fakeOpener{fail: c.fail, feed: r.feed}
			if c.gate {
				o.gate = make(chan struct{})
			}
			r.m = newChatModel(t.Context(), conn, nil, nil, nil, newSessionTarget(store.Project{Key: "DEMO"}), o.open)
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

// An error of `ballet chat` says "chat:" once.
func TestChatErrorsSayChatOnce(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	answer := func(status int, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"api unreachable", []string{"--url", gone.URL, "--project", "DEMO"},
			"ballet: chat: project DEMO: cannot reach the api at " + gone.URL},
		{"api unreachable, a session", []string{"--url", gone.URL, "--session", "s1"},
			"ballet: chat: session s1: cannot reach the api at " + gone.URL},
		{"an answer that is no JSON", []string{"--url", answer(200, "<html>"), "--project", "DEMO"},
			"ballet: chat: project DEMO: GET /projects/DEMO: decode answer: "},
		{"a refused token", []string{"--url", answer(401, `{"error":"unauthenticated","message":"bad token"}`), "--project", "DEMO"},
			"ballet: chat: project DEMO: the api refused the token"},
		{"no project", []string{"--url", answer(200, `{"items":[]}`)}, "ballet: chat: the token sees no project"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := execute(t.Context(), append([]string{"chat", "--plain", "--token", "t"}, c.args...), &out, &errOut)
			stderr := errOut.String()
			if code != exitFailure || !strings.HasPrefix(stderr, c.want) || strings.Count(stderr, "chat:") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit %d, %q… and \"chat:\" once", code, stderr, exitFailure, c.want)
			}
		})
	}
}

// `ballet chat` creates a new session with the first message, titled from
// it: piped input without text and a terminal chat quit before a message
// create none, and piped mode prints the session's id to go on with.
func TestChatNewSessions(t *testing.T) {
	t.Parallel()
	s := newChatStack(t)
	must(t, os.WriteFile(s.release, nil, 0o600)) // the answers hold for nothing
	titles := func() map[string]string {
		var list struct{ Items []struct{ ID, Title string } }
		must(t, s.getJSON("/projects/DEMO/planner/sessions", &list))
		m := map[string]string{}
		for _, it := range list.Items {
			m[it.ID] = it.Title
		}
		return m
	}
	// made is the sessions created since before, by id with their title.
	made := func(before map[string]string) map[string]string {
		m := titles()
		for id := range before {
			delete(m, id)
		}
		return m
	}
	var existing struct{ ID string }
	if st := s.rest.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "existing"}, &existing); st != 201 {
		t.Fatalf("create session: %d", st)
	}
	args := []string{"--url", s.url, "--token", s.token}

	t.Run("piped input without text", func(t *testing.T) {
		cases := []struct {
			name, stdin string
			args        []string
		}{
			{"empty", "", []string{"--project", "DEMO"}},
			{"blank lines", "\n   \n\t\n", []string{"--project", "DEMO"}},
			{"blank lines to a session", " \n\n", []string{"--session", existing.ID}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				before := titles()
				out, stderr, code := runChatIn(t, t.TempDir(), nil, c.stdin, append(args, c.args...)...)
				if m := made(before); len(m) > 0 {
					t.Errorf("it created sessions %v", m)
				}
				if code != 0 || out != "" || !strings.Contains(stderr, "chat: nothing to send") {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit 0, no output, and chat: nothing to send", code, out, stderr)
				}
			})
		}
	})

	t.Run("piped", func(t *testing.T) {
		before := titles()
		first := "plan the login page for the mobile app, with SSO and passwordless sign-in options"
		out, stderr, code := runChatIn(t, t.TempDir(), nil, "\n  \n"+first+"\n", append(args, "--project", "DEMO")...)
		id, ok := strings.CutPrefix(strings.SplitN(out, "\n", 2)[0], "session: ")
		if code != 0 || !ok || !strings.Contains(out, "done: end_turn") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and session: ID first", code, out, stderr)
		}
		want := map[string]string{id: "plan the login page for the mobile app, with SSO and…"}
		if m := made(before); !maps.Equal(m, want) {
			t.Fatalf("created sessions %v, want %v", m, want)
		}
		// The id goes on with the session.
		before = titles()
		out, stderr, code = runChatIn(t, t.TempDir(), nil, "and the logout page\n", append(args, "--session", id)...)
		if code != 0 || !strings.HasPrefix(out, "session: "+id+"\n") || !strings.Contains(out, "done: end_turn") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and session: %s first", code, out, stderr, id)
		}
		if m := made(before); len(m) > 0 {
			t.Fatalf("going on with a session created %v", m)
		}
		var sess store.Session
		must(t, s.getJSON("/planner/sessions/"+id, &sess))
		var human []string
		for _, turn := range sess.Messages {
			if turn.Role == "user" && len(turn.Content) > 0 && turn.Content[0].Type == store.BlockText {
				human = append(human, strings.TrimSpace(turn.Content[0].Text))
			}
		}
		if !slices.Equal(human, []string{first, "and the logout page"}) {
			t.Fatalf("the session's human messages are %q", human)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		chat := fmt.Sprintf("%s chat --url %s --token %s --project DEMO --new", shellQuote(os.Args[0]), s.url, s.token)
		before := titles()
		p := newPane(t, chat)
		p.waitFor("the chat screen", "ballet chat · DEMO · new session", "Enter sends")
		p.keys("C-c")
		p.waitFor("the chat to quit", "chat exited 0")
		if m := made(before); len(m) > 0 {
			t.Fatalf("a chat quit before a message created %v", m)
		}
		p = newPane(t, chat)
		p.waitFor("the chat screen", "ballet chat · DEMO · new session", "Enter sends")
		p.keys("-l", "draft the Q3 roadmap")
		p.keys("Enter")
		p.waitFor("the answer in the titled session", "ballet chat · DEMO · draft the Q3 roadmap",
			"you › draft the Q3 roadmap", "Nothing about auth yet", "Enter sends")
		p.keys("C-c")
		p.waitFor("the chat to quit", "chat exited 0")
		m := made(before)
		if len(m) != 1 || !slices.Equal(slices.Collect(maps.Values(m)), []string{"draft the Q3 roadmap"}) {
			t.Fatalf("created sessions %v, want one titled draft the Q3 roadmap", m)
		}
	})
}
