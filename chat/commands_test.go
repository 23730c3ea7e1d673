package chat

import (
	"slices"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/store"
)

// The commands typed in the composer decide the latest changeset waiting
// for a decision over the REST API, as the web app does, and say what
// they did; a failure says "chat:" once; text that is no command is a
// message.
func TestChatCommands(t *testing.T) {
	t.Parallel()
	proposed := resetChangeset("cs1", "Password reset", store.ChangesetProposed)
	cases := []struct {
		name  string
		sets  []store.Changeset // proposed in the session, in order
		typed string
		// refuse is the api's 400 answer to an apply; elsewhere applies
		// cs1 from another client once it is shown.
		refuse    string
		elsewhere bool
		asked     []string // the decisions the api got
		want, not []string
	}{
		{name: "apply whole", sets: []store.Changeset{proposed}, typed: "/apply",
			asked: []string{`apply cs1 {"operations":[0,1,2]}`},
			want: []string{"✓ applied “Password reset” whole (3 operations): created DEMO-11, DEMO-12; added 1 dependency",
				"◇ changeset “Password reset” · applied · 3 operations", "✓ 1. create_item ticket “Reset endpoint” ($api) → DEMO-11",
				"✓ 3. add_dependency $api blocks $page"},
			not: []string{"/apply applies it", "not applied"}},
		{name: "apply only those chosen", sets: []store.Changeset{proposed}, typed: "/apply 1",
			asked: []string{`apply cs1 {"operations":[0]}`},
			want: []string{"✓ applied operation 1 of “Password reset”: created DEMO-11",
				"✓ 1. create_item ticket “Reset endpoint” ($api) → DEMO-11",
				"– 2. create_item ticket “Reset page” ($page) (not applied)", "– 3. add_dependency $api blocks $page (not applied)"}},
		{name: "apply a range", sets: []store.Changeset{proposed}, typed: "/apply 2-3, 1",
			asked: []string{`apply cs1 {"operations":[0,1,2]}`},
			want:  []string{"✓ applied operations 1, 2, 3 of “Password reset”: created DEMO-11, DEMO-12; added 1 dependency"}},
		{name: "a refusal names operations as shown", sets: []store.Changeset{proposed}, typed: "/apply 1,3",
			refuse: `{"error":"invalid_argument","message":"operations[2]: dependency.to uses $page, created by operations[1], which is not chosen"}`,
			asked:  []string{`apply cs1 {"operations":[0,2]}`},
			want: []string{"✗ chat: apply “Password reset”: operation 3: dependency.to uses $page, created by operation 2, " +
				"which is not chosen (invalid_argument, HTTP 400)", "· proposed ·"}},
		{name: "decided elsewhere", sets: []store.Changeset{proposed}, typed: "/apply", elsewhere: true,
			asked: []string{`apply cs1 {"operations":[0,1,2]}`},
			want: []string{"✗ chat: apply “Password reset”: changeset cs1 is already applied (conflict, HTTP 409)",
				"◇ changeset “Password reset” · applied · 3 operations"}},
		{name: "an operation past the last", sets: []store.Changeset{proposed}, typed: "/apply 4",
			want: []string{"✗ chat: /apply 4: “Password reset” has operations 1 to 3", "· proposed ·"}},
		{name: "no operation number", sets: []store.Changeset{proposed}, typed: "/apply first",
			want: []string{`✗ chat: /apply first: "first" is not an operation number; operations are numbered from 1`}},
		{name: "reject with a reason", sets: []store.Changeset{proposed}, typed: "/reject too big for one sprint",
			asked: []string{`reject cs1 {"reason":"too big for one sprint"}`},
			want: []string{"✓ rejected “Password reset” (reason: too big for one sprint): nothing in the plan changed",
				"◇ changeset “Password reset” · rejected · 3 operations"},
			not: []string{"/apply applies it"}},
		{name: "reject without one", sets: []store.Changeset{proposed}, typed: "/reject",
			asked: []string{`reject cs1 {}`}, want: []string{"✓ rejected “Password reset”: nothing in the plan changed"}},
		{name: "the latest waiting", typed: "/reject", sets: []store.Changeset{proposed,
			resetChangeset("cs2", "Login page", store.ChangesetProposed)},
			asked: []string{`reject cs2 {}`}, want: []string{"✓ rejected “Login page”"}},
		{name: "an earlier one still waiting", typed: "/apply 1", sets: []store.Changeset{proposed,
			applied(resetChangeset("cs2", "Login page", store.ChangesetProposed), []int{0})},
			asked: []string{`apply cs1 {"operations":[0]}`}, want: []string{"✓ applied operation 1 of “Password reset”"}},
		{name: "none proposed", typed: "/apply",
			want: []string{"nothing to apply: the planner has proposed no changeset in this session"}, not: []string{"✗"}},
		{name: "all decided", typed: "/reject", sets: []store.Changeset{resetChangeset("cs1", "Password reset", store.ChangesetRejected)},
			want: []string{"nothing to reject: every changeset proposed in this session is applied or rejected"}, not: []string{"✗"}},
		{name: "help", typed: "/help", want: []string{"Commands (anything else you type is sent to the planner):",
			"/apply 1,3", "/reject [reason]", "/interrupt text", "Ctrl-C cancels the running turn"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			api, rest := newChangesetAPI(t, c.sets...)
			api.refuse = c.refuse
			conn := &fakeConn{}
			r := newScreenRun(t, conn, rest, map[string]string{})
			r.update(tea.WindowSizeMsg{Width: 200, Height: 80})
			r.watch()
			for _, cs := range c.sets {
				for _, o := range proposal("t-"+cs.ID, cs.ID) {
					r.output(o)
				}
				head := "◇ changeset “" + cs.Title + "” · " + cs.Status
				r.until("the changeset "+cs.ID, func() bool { return strings.Contains(r.screen(), head) })
			}
			if c.elsewhere {
				api.decide("cs1", func(cs store.Changeset) store.Changeset { return applied(cs, []int{0, 1, 2}) })
			}
			r.typeMessage(c.typed)
			r.until("what the command did", func() bool { return strings.Contains(r.screen(), c.want[0]) })
			screen := r.screen()
			expectScreen(t, screen, c.want, c.not)
			if asked := api.decisions(); !slices.Equal(asked, c.asked) {
				t.Errorf("the api was asked %q, want %q", asked, c.asked)
			}
			if n := strings.Count(screen, "chat:"); n > 1 {
				t.Errorf("the screen says chat: %d times:\n%s", n, screen)
			}
			if len(conn.sent) > 0 || strings.Contains(screen, "you › /") {
				t.Errorf("a command was sent to the planner: %q\n%s", conn.sent, screen)
			}
		})
	}
}

// Text starting with "/" that is no command is a message to the planner.
func TestChatSlashMessage(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{"a path": "/etc/hosts is wrong", "a longer word": "/applying is fine", "a slash": "/"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, conn := newTestScreen(t)
			m = feed(m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(text)})
			next, cmd := m.Update(tea.KeyMsg{Type: tea.KeyEnter})
			drain(cmd)
			if len(conn.sent) != 1 || conn.sent[0] != text || !strings.Contains(screenText(next.(model).View()), "you › "+text) {
				t.Fatalf("sent %q; screen:\n%s", conn.sent, screenText(next.(model).View()))
			}
		})
	}
}

// /interrupt text sends text with multitask interrupt (the server stops
// the open turns and runs it next); without text it sends nothing.
func TestChatInterrupt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, typed     string
		sent, multitask []string
		screen          string
	}{
		{"with text", "/interrupt   no, plan the login page first", []string{"no, plan the login page first"},
			[]string{store.MultitaskInterrupt}, "you › no, plan the login page first"},
		{"a message", "plan the login page", []string{"plan the login page"}, []string{""}, "you › plan the login page"},
		{"without text", "/interrupt", nil, nil, "✗ chat: /interrupt needs the message to send, as in /interrupt text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, conn := newTestScreen(t)
			m = feed(m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(c.typed)})
			next, cmd := m.Update(tea.KeyMsg{Type: tea.KeyEnter})
			if cmd != nil {
				drain(cmd)
			}
			screen := screenText(next.(model).View())
			conn.mu.Lock()
			defer conn.mu.Unlock()
			if !slices.Equal(conn.sent, c.sent) || !slices.Equal(conn.multitask, c.multitask) || !strings.Contains(screen, c.screen) {
				t.Fatalf("sent %q with %q, want %q with %q; screen:\n%s", conn.sent, conn.multitask, c.sent, c.multitask, screen)
			}
		})
	}
}
