package chat

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// resetChangeset is a proposal of two tickets, the first blocking the
// second.
func resetChangeset(id, title, status string) store.Changeset {
	return store.Changeset{ID: id, Project: "DEMO", Title: title, Status: status, Operations: []store.Operation{
		{Kind: store.OpCreateItem, Ref: "api", Create: &store.NewItem{Kind: "ticket", Title: "Reset endpoint"}},
		{Kind: store.OpCreateItem, Ref: "page", Create: &store.NewItem{Kind: "ticket", Title: "Reset page"}},
		{Kind: store.OpAddDependency, Dependency: &store.DependencySpec{From: "$api", To: "$page", Type: "blocks"}},
	}}
}

// changesetAPI serves the changeset routes of the REST API from a map:
// apply gives each created item the key DEMO-(11+its index), and a
// decided changeset is a conflict, as the api does.
type changesetAPI struct {
	mu   sync.Mutex
	sets map[string]store.Changeset
	// refuse, when set, is the body of a 400 answer to every apply.
	refuse string
	asked  []string // "verb id body" of each decision asked
	loads  int
}

func newChangesetAPI(t *testing.T, sets ...store.Changeset) (*changesetAPI, *restClient) {
	a := &changesetAPI{sets: map[string]store.Changeset{}}
	for _, cs := range sets {
		a.sets[cs.ID] = cs
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, newRESTClient(srv.URL, "token")
}

func (a *changesetAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	answer := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	refuse := func(status int, code, msg string) { answer(status, map[string]string{"error": code, "message": msg}) }
	id, verb, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/api/v1/changesets/"), "/")
	cs, ok := a.sets[id]
	if !ok {
		refuse(http.StatusNotFound, "not_found", "changeset not found")
		return
	}
	if r.Method == http.MethodGet {
		a.loads++
		answer(http.StatusOK, cs)
		return
	}
	body, _ := io.ReadAll(r.Body)
	a.asked = append(a.asked, verb+" "+id+" "+strings.TrimSpace(string(body)))
	switch {
	case verb == "apply" && a.refuse != "":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(a.refuse))
		return
	case cs.Status != store.ChangesetProposed:
		refuse(http.StatusConflict, "conflict", "changeset "+id+" is already "+cs.Status)
		return
	case verb == "reject":
		cs.Status = store.ChangesetRejected
	default:
		var req struct{ Operations []int }
		_ = json.Unmarshal(body, &req)
		cs = applied(cs, req.Operations)
	}
	a.sets[id] = cs
	answer(http.StatusOK, cs)
}

// applied is cs with the operations chosen applied.
func applied(cs store.Changeset, chosen []int) store.Changeset {
	cs.Status, cs.AppliedOperations, cs.Results = store.ChangesetApplied, chosen, nil
	for i, op := range cs.Operations {
		r := store.OperationResult{Operation: i, Kind: op.Kind, Status: store.ResultSkipped}
		if slices.Contains(chosen, i) {
			r.Status = store.ResultApplied
			if op.Kind == store.OpCreateItem {
				r.Item = fmt.Sprintf("DEMO-%d", 11+i)
			}
		}
		cs.Results = append(cs.Results, r)
	}
	return cs
}

// decide makes a decision on a changeset as another client would.
func (a *changesetAPI) decide(id string, cs func(store.Changeset) store.Changeset) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sets[id] = cs(a.sets[id])
}

func (a *changesetAPI) decisions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked)
}

// proposal is the outputs of a successful propose_changeset of id in turn.
func proposal(turn, id string) []rpcclient.Output {
	return []rpcclient.Output{
		{Turn: turn, Type: store.OutputToolCall, Tool: toolPropose, ToolUseID: "u-" + id, Input: json.RawMessage(`{}`)},
		{Turn: turn, Type: store.OutputToolResult, Tool: toolPropose, ToolUseID: "u-" + id,
			Text: `{"id":"` + id + `","status":"proposed","title":"Password reset","operations":3}`},
	}
}

// A successful propose_changeset shows the changeset under its tool line:
// its title, status and each operation; a failed one shows none.
func TestChatScreenShowsProposedChangeset(t *testing.T) {
	t.Parallel()
	withUpdate := resetChangeset("cs1", "Password reset", store.ChangesetProposed)
	title := "Reset the password by email"
	withUpdate.Operations = append(withUpdate.Operations, store.Operation{Kind: store.OpUpdateItem,
		Update: &store.ItemUpdate{Item: "DEMO-3", ItemPatch: store.ItemPatch{Title: &title, Epic: new(string)}}})
	failed := []rpcclient.Output{
		{Turn: "t1", Type: store.OutputToolCall, Tool: toolPropose, ToolUseID: "u1", Input: json.RawMessage(`{}`)},
		{Turn: "t1", Type: store.OutputToolResult, Tool: toolPropose, ToolUseID: "u1", IsError: true,
			Text: `operations[2]: dependency.from: "$nope" is not a ref`},
	}
	cases := []struct {
		name      string
		outs      []rpcclient.Output
		want, not []string
		loads     int
	}{
		{"proposed", proposal("t1", "cs1"), []string{"✓ propose_changeset\n◇ changeset “Password reset” · proposed · 4 operations",
			"    1. create_item ticket “Reset endpoint” ($api)", "    2. create_item ticket “Reset page” ($page)",
			"    3. add_dependency $api blocks $page", "    4. update_item DEMO-3 title “Reset the password by email”, epic",
			"/apply applies it · /apply 1,3 only those operations · /reject [reason] rejects it"}, nil, 1},
		{"not found", proposal("t1", "cs9"), []string{
			"✗ changeset cs9: chat: changeset cs9: changeset not found (not_found, HTTP 404)"}, []string{"◇"}, 0},
		{"a failed proposal", failed, []string{"✗ propose_changeset: operations[2]"}, []string{"◇", "changeset cs"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			api, rest := newChangesetAPI(t, withUpdate)
			r := newScreenRun(t, &fakeConn{}, rest, map[string]string{})
			r.update(tea.WindowSizeMsg{Width: 160, Height: 60})
			r.watch()
			for _, o := range c.outs {
				r.output(o)
			}
			r.until("the changeset", func() bool { return strings.Contains(r.screen(), c.want[0]) })
			expectScreen(t, r.screen(), c.want, c.not)
			api.mu.Lock()
			defer api.mu.Unlock()
			if api.loads != c.loads || strings.Count(r.screen(), "chat:") > 1 {
				t.Fatalf("loaded %d times, want %d; the screen:\n%s", api.loads, c.loads, r.screen())
			}
		})
	}
}
