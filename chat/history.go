package chat

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
)

// historyPage is how many stored outputs one request of the history reads
// (the most the REST API gives at once).
const historyPage = 1000

// history loads every stored output of session id, in cursor order, over
// REST. A chat shows them before it watches the session from the last one,
// so that its screen starts from the session as it is: the turns of the
// history are over, and only a turn still queued or running shows as one.
func (c *restClient) history(ctx context.Context, id string) ([]rpcclient.Output, error) {
	var all []rpcclient.Output
	var from int64
	for {
		var page struct{ Items []rpcclient.Output }
		path := fmt.Sprintf("/planner/sessions/%s/outputs?from_cursor=%d&limit=%d", url.PathEscape(id), from, historyPage)
		if err := c.do(ctx, http.MethodGet, path, nil, &page); err != nil {
			return nil, fmt.Errorf("chat: history of session %s: %w", id, err)
		}
		all = append(all, page.Items...)
		if len(page.Items) < historyPage {
			return all, nil
		}
		from = page.Items[len(page.Items)-1].Cursor
	}
}

// lastCursor is the cursor of the last stored output of outs (0: none).
func lastCursor(outs []rpcclient.Output) int64 {
	for i := len(outs) - 1; i >= 0; i-- {
		if outs[i].Cursor > 0 {
			return outs[i].Cursor
		}
	}
	return 0
}

// applyHistory shows the session's stored outputs at once, before the
// screen is first drawn, and keeps the commands they ask for (loading a
// changeset, a message an older server's output lacks) for Init.
func (m *model) applyHistory(outs []rpcclient.Output) {
	for _, o := range outs {
		if cmd := m.apply(o); cmd != nil {
			m.startup = append(m.startup, cmd)
		}
	}
}

// runScreen runs the chat screen until the human quits. An existing
// session shows its history, loaded over REST, and is watched after it; a
// new one is watched from the start once the first message created it.
func runScreen(ctx context.Context, c *rpcclient.Client, rest *restClient, tgt target) error {
	var m model
	if tgt.session.ID == "" {
		m = newModel(ctx, c, rest, nil, c.States(), tgt, newSessionOpener(rest, c, tgt.project))
	} else {
		hist, err := rest.history(ctx, tgt.session.ID)
		if err != nil {
			return err
		}
		w, err := watchSession(ctx, c, tgt.session.ID, lastCursor(hist))
		if err != nil {
			return err
		}
		tgt.history = hist
		m = newModel(ctx, c, rest, w, c.States(), tgt, nil)
	}
	if _, err := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx)).Run(); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	return nil
}
