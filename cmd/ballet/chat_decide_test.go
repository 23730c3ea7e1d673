package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// In a terminal, the changeset the planner proposed shows its operations;
// /apply 1 applies only the first and says the key it created, /reject
// rejects the next proposal with the reason given, and with nothing
// waiting for a decision the commands say so.
func TestChatDecidesChangesets(t *testing.T) {
	t.Parallel()
	s := newChatStack(t)
	must(t, os.WriteFile(s.release, nil, 0o600)) // no hold here
	var sess struct{ ID string }
	if st := s.rest.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "changesets"}, &sess); st != 201 {
		t.Fatalf("create session: %d", st)
	}
	p := newPane(t, fmt.Sprintf("%s chat --url %s --token %s --session %s", shellQuote(os.Args[0]), s.url, s.token, sess.ID))
	p.waitFor("the chat screen", "ballet chat · DEMO · changesets", "Enter sends")
	enter := func(text string) {
		p.keys("-l", text)
		p.keys("Enter")
	}

	enter("/apply")
	p.waitFor("no changeset yet", "nothing to apply: the planner has proposed no changeset in this session")

	enter("propose the reset tickets")
	p.waitFor("the proposal", "I proposed a changeset for you to review.", "✓ propose_changeset",
		"◇ changeset “Password reset” · proposed · 3 operations", "1. create_item ticket “Reset endpoint” ($api)",
		"2. create_item ticket “Reset page” ($page)", "3. add_dependency $api blocks $page", "Enter sends")

	enter("/apply 1")
	p.waitFor("the apply", "✓ applied operation 1 of “Password reset”: created DEMO-")
	applied := s.changesets(t, store.ChangesetApplied)
	if len(applied) != 1 || applied[0].AppliedOperations[0] != 0 || len(applied[0].AppliedOperations) != 1 {
		t.Fatalf("applied changesets %+v, want one with operation 0 applied", applied)
	}
	key := applied[0].Results[0].Item
	p.waitFor("the created key", "✓ applied operation 1 of “Password reset”: created "+key+"\n",
		"◇ changeset “Password reset” · applied · 3 operations", "1. create_item ticket “Reset endpoint” ($api) → "+key,
		"– 2. create_item ticket “Reset page” ($page) (not applied)")
	var item struct{ Title string }
	if st := s.rest.do("GET", "/items/"+key, nil, &item); st != 200 || item.Title != "Reset endpoint" {
		t.Fatalf("GET /items/%s: %d %+v", key, st, item)
	}

	enter("propose them once more")
	p.waitFor("the second proposal", "◇ changeset “Password reset” · proposed · 3 operations", "Enter sends")
	enter("/reject too big for one sprint")
	p.waitFor("the rejection", "✓ rejected “Password reset” (reason: too big for one sprint): nothing in the plan changed",
		"◇ changeset “Password reset” · rejected · 3 operations")
	if rejected := s.changesets(t, store.ChangesetRejected); len(rejected) != 1 || rejected[0].Title != "Password reset" {
		t.Fatalf("rejected changesets %+v, want the second proposal", rejected)
	}

	enter("/reject")
	p.waitFor("nothing left to decide", "nothing to reject: every changeset proposed in this session is applied or rejected")
	if screen := p.capture(); strings.Contains(screen, "chat: chat:") {
		t.Fatalf("an error says chat: twice:\n%s", screen)
	}
	p.keys("C-c")
	p.waitFor("the chat to quit", "chat exited 0")
}

// Reopened, a long session whose turns are all done shows its history
// without ever saying a turn is answering; a resize keeps its newest
// lines in view.
func TestChatReopensLongSession(t *testing.T) {
	t.Parallel()
	s := newChatStack(t)
	must(t, os.WriteFile(s.release, nil, 0o600))
	var in strings.Builder
	const turns = 60
	for i := range turns {
		fmt.Fprintf(&in, "find auth %d\n", i)
	}
	out, stderr, code := runChatIn(t, t.TempDir(), nil, in.String(), "--url", s.url, "--token", s.token, "--project", "DEMO")
	id, ok := strings.CutPrefix(strings.SplitN(out, "\n", 2)[0], "session: ")
	if code != 0 || !ok || strings.Count(out, "done: end_turn") != turns {
		t.Fatalf("exit %d, stderr %q; want %d turns done:\n%s", code, stderr, turns, out)
	}
	last := fmt.Sprintf("you › find auth %d", turns-1)

	p := newPane(t, fmt.Sprintf("%s chat --url %s --token %s --session %s", shellQuote(os.Args[0]), s.url, s.token, id))
	p.waitWithout("the whole history", "answering", last, "Enter sends")
	p.tmux("resize-window", "-t", "chat", "-x", "80", "-y", "20")
	// A 40-line screen cut to 20 lines cannot show both the header and the
	// status line: both show once the chat has drawn itself again.
	p.waitWithout("the newest lines after a resize", "answering", "ballet chat · DEMO", last, "Enter sends")
	if screen := p.capture(); !strings.Contains(screen[strings.Index(screen, last):], "Nothing about auth yet") {
		t.Fatalf("the last answer is out of view:\n%s", screen)
	}
	p.keys("C-c")
	p.waitFor("the chat to quit", "chat exited 0")
}

// changesets lists DEMO's changesets of a status.
func (s chatStack) changesets(t *testing.T, status string) []store.Changeset {
	t.Helper()
	var list struct{ Items []store.Changeset }
	must(t, s.getJSON("/projects/DEMO/changesets?status="+status, &list))
	return list.Items
}
