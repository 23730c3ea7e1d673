package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/balletplanner/ballet/store/storetest"
)

// chatScript is the model of the chat tests: a message asking to go slow
// streams for a long while; any other one searches the plan, then answers
// in Markdown.
var chatScript = `name: chat
answers:
  - match: '\[tool_result search_project\]'
    content:
      - text: "Nothing about **auth** yet: I found no matching items."
  - match: '(?i)slow'
    chunk_size: 6
    chunk_latency: 300ms
    content:
      - text: "Thinking slowly about this one` + strings.Repeat(", and then some more", 60) + `."
  - match: '(?s).*'
    content:
      - text: "Let me search the plan."
      - tool_use: {name: search_project, input: {query: auth}}
`

// chatStack is `ballet serve` with the demo data and the chat script.
type chatStack struct {
	url, token string
	rest       client
}

func newChatStack(t *testing.T) chatStack {
	t.Helper()
	script := filepath.Join(t.TempDir(), "chat.yaml")
	must(t, os.WriteFile(script, []byte(chatScript), 0o600))
	p, token, _ := startDemoServe(t, script, "BALLET_WORKER_TASK_CHECK_INTERVAL=20ms")
	s := chatStack{url: "http://" + p.addr, token: token}
	s.rest = client{t: t, base: s.url + "/api/v1", token: token}
	return s
}

// runChatIn runs `ballet chat args` in dir with stdin, and returns its
// stdout, stderr and exit code.
func runChatIn(t *testing.T, dir string, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return balletIn(t, dir, stdin, env, append([]string{"chat"}, args...)...)
}

func TestChat(t *testing.T) {
	t.Parallel()
	s := newChatStack(t)

	// Refused before anything is written (run first, while no other
	// subtest makes sessions).
	sessions := func() int {
		var list struct{ Items []any }
		if st := s.rest.do("GET", "/projects/DEMO/planner/sessions", nil, &list); st != 200 {
			t.Fatalf("list sessions: %d", st)
		}
		return len(list.Items)
	}
	before := sessions()
	t.Run("refusals", func(t *testing.T) {
		cases := []struct {
			name string
			args []string
			code int
			want string
		}{
			{"bad token", []string{"--token", "nope", "--project", "DEMO"}, 1, "the api refused the token (unauthenticated"},
			{"unknown project", []string{"--token", s.token, "--project", "NOPE"}, 1, `project "NOPE" not found`},
			{"unknown session", []string{"--token", s.token, "--session", uuid.NewString()}, 1, "not found"},
			{"session and new", []string{"--token", s.token, "--session", uuid.NewString(), "--new"}, 2, "--session and --new exclude each other"},
			{"bad url", []string{"--token", s.token, "--url", "ftp://x"}, 2, "must be an http:// or https:// URL"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{"--url", s.url, "--plain"}, c.args...)
				out, stderr, code := runChatIn(t, t.TempDir(), nil, "hello\n", args...)
				if code != c.code || !strings.Contains(stderr, c.want) || out != "" {
					t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, stderr, c.code, c.want)
				}
			})
		}
	})
	if after := sessions(); after != before {
		t.Fatalf("refused chats made sessions: %d before, %d after", before, after)
	}

	// Piped, it sends each line and prints each turn's answers, tool
	// summaries and end; the token comes from the file `make run` writes.
	// (The subtests run one after the other: the terminal one picks the
	// project's most recent session.)
	t.Run("plain", func(t *testing.T) {
		dir := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(dir, ".dev"), 0o700))
		must(t, os.WriteFile(filepath.Join(dir, demoTokenFile), []byte(s.token+"\n"), 0o600))
		out, stderr, code := runChatIn(t, dir, nil, "find auth\n\nthanks\n", "--url", s.url, "--project", "DEMO")
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, out)
		}
		var lines []string
		queued := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(l, "queued (position ") {
				queued++
				continue
			}
			lines = append(lines, l)
		}
		turn := []string{"assistant: Let me search the plan.", "tool search_project: ok",
			"assistant: Nothing about **auth** yet: I found no matching items.", "done: end_turn"}
		if want := append(append([]string{}, turn...), turn...); strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Fatalf("output:\n%s\nwant (beside queued lines):\n%s", out, strings.Join(want, "\n"))
		}
		if queued != 1 || !strings.Contains(out, "queued (position 1)") {
			t.Fatalf("the second message did not show queued (position 1):\n%s", out)
		}
	})

	// In a terminal: the session is picked from the project's list; a
	// message streams in and is rendered as Markdown with a one-line tool
	// summary; Ctrl-C cancels a long turn and a second one quits. Opened
	// again, the session shows its history.
	t.Run("terminal", func(t *testing.T) {
		var sess struct{ ID string }
		if st := s.rest.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "terminal test"}, &sess); st != 201 {
			t.Fatalf("create session: %d", st)
		}
		chat := fmt.Sprintf("%s chat --url %s --token %s", shellQuote(os.Args[0]), s.url, s.token)
		p := newPane(t, chat+" --project DEMO")
		p.waitFor("the session list", "Pick a session of DEMO", "▸ + new session", "terminal test · just now")
		p.keys("Down")
		p.waitFor("the cursor on the session", "▸ terminal test")
		p.keys("Enter")
		p.waitFor("the chat screen", "ballet chat · DEMO · terminal test", "Enter sends")
		p.keys("-l", "find auth")
		p.keys("M-Enter")
		p.keys("-l", "please")
		p.keys("Enter")
		p.waitFor("the rendered answer", "you › find auth\n      please", "Let me search the plan.", "✓ search_project",
			"Nothing about auth yet", "Enter sends")
		if screen := p.capture(); strings.Contains(screen, "**auth**") {
			t.Fatalf("the answer was not rendered as Markdown:\n%s", screen)
		}
		p.keys("-l", "now go slow")
		p.keys("Enter")
		p.waitFor("the slow answer streaming", "Thinking slowly", "answering · Ctrl-C cancels")
		p.keys("C-c")
		p.waitFor("the cancelled turn", "— cancelled", "Enter sends")
		p.keys("C-c")
		p.waitFor("the chat to quit", "chat exited 0")

		again := newPane(t, chat+" --session "+sess.ID)
		again.waitFor("the history", "you › find auth\n      please", "✓ search_project", "Nothing about auth yet",
			"you › now go slow", "— cancelled", "Enter sends")
		again.keys("C-c")
		again.waitFor("the chat to quit", "chat exited 0")
	})
}

func TestChatWithoutToken(t *testing.T) {
	t.Parallel()
	_, stderr, code := runChatIn(t, t.TempDir(), nil, "", "--plain", "--url", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(stderr, "no API token: pass --token, set $BALLET_TOKEN, or run `make run`") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// pane is a tmux session of its own server running one command in a
// 120×40 terminal.
type pane struct {
	t    *testing.T
	sock string
}

func newPane(t *testing.T, command string) pane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		installTmux(t)
	}
	// A server of its own, on a socket in the test's directory (removed with it).
	p := pane{t: t, sock: filepath.Join(t.TempDir(), "tmux")}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", p.sock, "kill-server").Run() })
	// The shell keeps the pane after the chat exits, to show how it ended.
	script := fmt.Sprintf("cd %s && BALLET_TEST_AS_MAIN=1 %s; echo chat exited $?; exec cat", shellQuote(t.TempDir()), command)
	p.tmux("-f", "/dev/null", "new-session", "-d", "-s", "chat", "-x", "120", "-y", "40", script)
	return p
}

// installTmux installs tmux with apt, as root only.
func installTmux(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the terminal test needs tmux: install it (apt-get install tmux) or run the tests as root, which installs it")
	}
	if out, err := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "tmux").CombinedOutput(); err != nil {
		t.Fatalf("apt-get install tmux: %v\n%s", err, out)
	}
}

func (p pane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (p pane) keys(keys ...string) {
	p.t.Helper()
	p.tmux(append([]string{"send-keys", "-t", "chat"}, keys...)...)
}

func (p pane) capture() string {
	p.t.Helper()
	return p.tmux("capture-pane", "-p", "-t", "chat")
}

// waitFor waits until the screen shows every one of want.
func (p pane) waitFor(what string, want ...string) {
	p.t.Helper()
	var screen string
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		screen = p.capture()
		for _, w := range want {
			if !strings.Contains(screen, w) {
				return false
			}
		}
		return true
	}) {
		p.t.Fatalf("timed out after %s waiting for %s; the screen:\n%s", storetest.WaitTimeout, what, screen)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
