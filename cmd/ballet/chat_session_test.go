package main

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

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
