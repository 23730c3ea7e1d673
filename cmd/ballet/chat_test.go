package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/balletplanner/ballet/chat"
	"github.com/balletplanner/ballet/store/storetest"
)

// chatScript is the model of the chat tests: a message asking to go slow
// streams for a long while; one asking to propose proposes a changeset of
// two tickets, the first blocking the second; any other one searches the
// plan, then answers in Markdown, once a file exists at the path formatted
// in.
var chatScript = `name: chat
answers:
  - match: '\[tool_result search_project\]'
    hold_until: %q
    content:
      - text: "Nothing about **auth** yet: I found no matching items."
  - match: '\[tool_result propose_changeset\]'
    content:
      - text: "I proposed a changeset for you to review."
  - match: '(?i)propose'
    content:
      - text: "Let me propose the tickets."
      - tool_use:
          name: propose_changeset
          input:
            title: Password reset
            summary: The endpoint first, then the page that calls it.
            operations:
              - {kind: create_item, ref: api, create: {kind: ticket, title: Reset endpoint}}
              - {kind: create_item, ref: page, create: {kind: ticket, title: Reset page}}
              - {kind: add_dependency, dependency: {from: $api, to: $page, type: blocks}}
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
	// release is the file the model's answers after a search wait for.
	release string
}

func newChatStack(t *testing.T) chatStack {
	t.Helper()
	script := filepath.Join(t.TempDir(), "chat.yaml")
	release := filepath.Join(t.TempDir(), "release")
	must(t, os.WriteFile(script, []byte(fmt.Sprintf(chatScript, release)), 0o600))
	p, token, _ := startDemoServe(t, script, "BALLET_WORKER_TASK_CHECK_INTERVAL=20ms")
	s := chatStack{url: "http://" + p.addr, token: token, release: release}
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
	sessions := func() map[string]bool {
		ids, err := s.sessionIDs()
		must(t, err)
		return ids
	}
	known := sessions()
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
	if after := sessions(); len(after) != len(known) {
		t.Fatalf("refused chats made sessions: %d before, %d after", len(known), len(after))
	}

	// Piped, it prints the session it made, then sends each line and
	// prints each turn's answers, tool summaries and end; the token comes
	// from the file `make run` writes.
	// (The subtests run one after the other: the terminal one picks the
	// project's most recent session.)
	t.Run("plain", func(t *testing.T) {
		dir := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(dir, ".dev"), 0o700))
		must(t, os.WriteFile(filepath.Join(dir, chat.DemoTokenFile), []byte(s.token+"\n"), 0o600))
		// The first turn answers once the second line is queued behind it.
		stop := make(chan struct{})
		released := s.releaseOnceQueued(known, 2, stop)
		out, stderr, code := runChatIn(t, dir, nil, "find auth\n\nthanks\n", "--url", s.url, "--project", "DEMO")
		close(stop)
		must(t, <-released)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, out)
		}
		id, rest, _ := strings.Cut(out, "\n")
		id, ok := strings.CutPrefix(id, "session: ")
		if !ok || known[id] {
			t.Fatalf("the first line is not the new session's id:\n%s", out)
		}
		var lines []string
		queued := 0
		for _, l := range strings.Split(strings.TrimSpace(rest), "\n") {
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
		must(t, os.WriteFile(s.release, nil, 0o600)) // no hold here
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

// waitWithout is waitFor, failing as soon as a screen shows never.
func (p pane) waitWithout(what, never string, want ...string) {
	p.t.Helper()
	var screen string
	shown := false
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		screen = p.capture()
		if shown = strings.Contains(screen, never); shown {
			return true
		}
		for _, w := range want {
			if !strings.Contains(screen, w) {
				return false
			}
		}
		return true
	}) {
		p.t.Fatalf("timed out after %s waiting for %s; the screen:\n%s", storetest.WaitTimeout, what, screen)
	}
	if shown {
		p.t.Fatalf("the screen showed %q while waiting for %s:\n%s", never, what, screen)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// sessionIDs lists the ids of DEMO's sessions, with an error instead of a
// failed test, for a goroutine.
func (s chatStack) sessionIDs() (map[string]bool, error) {
	var list struct{ Items []struct{ ID string } }
	if err := s.getJSON("/projects/DEMO/planner/sessions", &list); err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, it := range list.Items {
		ids[it.ID] = true
	}
	return ids, nil
}

// releaseOnceQueued creates the file the model's answers wait for once one
// of DEMO's sessions not in known holds n queued outputs, or returns when
// stop closes. It reports on the channel: nil once released or stopped, an
// error when it gave up (and released all the same, so nothing hangs).
func (s chatStack) releaseOnceQueued(known map[string]bool, n int, stop <-chan struct{}) <-chan error {
	errc := make(chan error, 1)
	go func() {
		var err error
		ok := storetest.Poll(storetest.WaitTimeout, func() bool {
			select {
			case <-stop:
				err = nil
				return true
			default:
			}
			var ids map[string]bool
			if ids, err = s.sessionIDs(); err != nil {
				return false
			}
			for id := range ids {
				var outs struct{ Items []struct{ Type string } }
				if known[id] {
					continue
				}
				if err = s.getJSON("/planner/sessions/"+id+"/outputs", &outs); err != nil {
					return false
				}
				queued := 0
				for _, o := range outs.Items {
					if o.Type == "queued" {
						queued++
					}
				}
				if queued >= n {
					err = os.WriteFile(s.release, nil, 0o600)
					return true
				}
			}
			return false
		})
		if !ok {
			err = fmt.Errorf("no new session of DEMO with %d queued outputs within %s (last error: %v)", n, storetest.WaitTimeout, err)
			_ = os.WriteFile(s.release, nil, 0o600)
		}
		errc <- err
	}()
	return errc
}

// getJSON decodes the answer to a GET of the api path into out.
func (s chatStack) getJSON(path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, s.url+"/api/v1"+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", path, res.StatusCode)
	}
	return json.NewDecoder(res.Body).Decode(out)
}
