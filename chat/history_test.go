package chat

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// doneTurns is the stored outputs of n answered turns, queued one behind
// the other, numbered from cursor 1.
func doneTurns(n int) []rpcclient.Output {
	var outs []rpcclient.Output
	add := func(o rpcclient.Output) {
		o.Cursor = int64(len(outs) + 1)
		outs = append(outs, o)
	}
	for i := range n {
		turn := fmt.Sprintf("t%d", i)
		add(rpcclient.Output{Turn: turn, Type: store.OutputQueued, Position: pos(int64(min(i, 1))), Role: "user",
			Content: textBlocks(fmt.Sprintf("question %d", i))})
		add(rpcclient.Output{Turn: turn, Type: store.OutputStarted})
		add(rpcclient.Output{Turn: turn, Type: store.OutputMessage, Role: "assistant", Content: textBlocks(fmt.Sprintf("answer %d", i))})
		add(rpcclient.Output{Turn: turn, Type: store.OutputDone, Text: store.ReasonEndTurn})
	}
	return outs
}

// A session opened with its history shows it whole from the first screen:
// its turns that are over never show as answering, a turn still running
// does, and the changesets proposed in it are loaded.
func TestChatScreenOpensHistory(t *testing.T) {
	t.Parallel()
	running := append(doneTurns(40), rpcclient.Output{Turn: "t40", Type: store.OutputQueued, Cursor: 161, Position: pos(0),
		Role: "user", Content: textBlocks("question 40")}, rpcclient.Output{Turn: "t40", Type: store.OutputStarted, Cursor: 162})
	proposed := slices.Insert(doneTurns(1), 3, proposal("t0", "cs1")...)
	for i := range proposed {
		proposed[i].Cursor = int64(i + 1)
	}
	cases := []struct {
		name      string
		history   []rpcclient.Output
		want, not []string
	}{
		{"all done", doneTurns(40), []string{"you › question 39", "answer 39", "Enter sends"}, []string{"answering", "⟳"}},
		{"the last one running", running, []string{"answer 39", "you › question 40", "answering · Ctrl-C cancels"}, nil},
		{"a changeset proposed", proposed, []string{"answer 0", "◇ changeset “Password reset” · proposed · 3 operations",
			"1. create_item ticket “Reset endpoint”"}, []string{"answering"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, rest := newChangesetAPI(t, resetChangeset("cs1", "Password reset", store.ChangesetProposed))
			tgt := target{project: store.Project{Key: "DEMO"}, session: store.Session{ID: "s1", Title: "Plan"},
				human: map[string]string{}, history: c.history}
			r := &screenRun{t: t, feed: make(chan rpcclient.Output), msgs: make(chan tea.Msg, 1024), stop: make(chan struct{})}
			t.Cleanup(func() { close(r.stop) })
			r.m = newModel(t.Context(), &fakeConn{}, rest, fakeFeed{ch: r.feed}, nil, tgt, nil)
			// The first screen, before anything came from the watch.
			r.update(tea.WindowSizeMsg{Width: 100, Height: 40})
			if first := r.screen(); strings.Contains(first, "answering") != slices.Contains(c.want, "answering · Ctrl-C cancels") {
				t.Fatalf("the first screen:\n%s", first)
			}
			r.exec(r.m.Init())
			r.until("the history", func() bool { return strings.Contains(r.screen(), c.want[1]) })
			expectScreen(t, r.screen(), c.want, c.not)
		})
	}
}

// The history is read page by page, each after the last cursor of the one
// before, until a page is not full.
func TestChatHistoryPages(t *testing.T) {
	t.Parallel()
	const stored = 2*historyPage + 7
	var mu sync.Mutex
	var froms []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/planner/sessions/s1/outputs" || r.URL.Query().Get("limit") != strconv.Itoa(historyPage) {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		froms = append(froms, r.URL.Query().Get("from_cursor"))
		mu.Unlock()
		from, _ := strconv.Atoi(r.URL.Query().Get("from_cursor"))
		var page struct {
			Items []store.Output `json:"items"`
		}
		for c := from + 1; c <= min(from+historyPage, stored); c++ {
			page.Items = append(page.Items, store.Output{Turn: "t", Type: store.OutputStarted, Cursor: int64(c)})
		}
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(api.Close)
	outs, err := newRESTClient(api.URL, "token").history(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0", strconv.Itoa(historyPage), strconv.Itoa(2 * historyPage)}
	if len(outs) != stored || lastCursor(outs) != stored || !slices.Equal(froms, want) {
		t.Fatalf("%d outputs to cursor %d, read from %q; want %d to %d from %q", len(outs), lastCursor(outs), froms, stored, stored, want)
	}
}

// An api that cannot be reached or refuses fails the history with an
// error that says "chat:" once.
func TestChatHistoryErrors(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"forbidden","message":"missing permission tracker.read"}`))
	}))
	t.Cleanup(refusing.Close)
	cases := []struct{ name, url, want string }{
		{"unreachable", gone.URL, "chat: history of session s1: cannot reach the api at " + gone.URL},
		{"refused", refusing.URL, "chat: history of session s1: missing permission tracker.read (forbidden, HTTP 403)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := newRESTClient(c.url, "token").history(t.Context(), "s1")
			if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Count(err.Error(), "chat:") != 1 {
				t.Fatalf("error %v; want %q… and chat: once", err, c.want)
			}
		})
	}
}
