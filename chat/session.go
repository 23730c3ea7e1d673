package chat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// maxTitle is the most characters of the title a chat gives the session
// it creates, "…" included.
const maxTitle = 60

// sessionTitle is the title of the session a chat creates for the human's
// first message: the message's first line with a letter or digit, its runs
// of blanks and control characters made one space, cut at a word boundary
// to at most maxTitle characters with "…" when cut; "Chat <now>" when no
// line of the message has a letter or digit.
func sessionTitle(text string, now time.Time) string {
	for line := range strings.Lines(strings.ToValidUTF8(text, " ")) {
		words := strings.FieldsFunc(line, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
		title := strings.Join(words, " ")
		if strings.ContainsFunc(title, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
			return cutTitle(title)
		}
	}
	return "Chat " + now.Format("2006-01-02 15:04")
}

// cutTitle cuts a one-line title longer than maxTitle characters at its
// last space that leaves room for "…" (mid-word when that space comes
// before the middle), and ends it with "…".
func cutTitle(title string) string {
	r := []rune(title)
	if len(r) <= maxTitle {
		return title
	}
	cut := maxTitle - 1
	for i := cut; i >= maxTitle/2; i-- {
		if r[i] == ' ' {
			cut = i
			break
		}
	}
	return strings.TrimRight(string(r[:cut]), " ,;:") + "…"
}

// sessionOpener creates the session of a new chat for the human's first
// message, titled from it, and watches it. After a failed watch the next
// call watches the session created already rather than create another.
type sessionOpener func(ctx context.Context, first string) (store.Session, watchFeed, error)

// newSessionOpener opens sessions of project p: created over rest, watched
// on c.
func newSessionOpener(rest *restClient, c *rpcclient.Client, p store.Project) sessionOpener {
	var mu sync.Mutex
	var created store.Session
	return func(ctx context.Context, first string) (store.Session, watchFeed, error) {
		mu.Lock()
		defer mu.Unlock()
		if created.ID == "" {
			s, err := rest.createSession(ctx, p.Key, sessionTitle(first, time.Now()))
			if err != nil {
				return store.Session{}, nil, err
			}
			created = s
		}
		w, err := watchSession(ctx, c, created.ID, 0)
		if err != nil {
			return store.Session{}, nil, err
		}
		return created, w, nil
	}
}

// watchSession follows the outputs of session id after cursor from (0:
// from its first one).
func watchSession(ctx context.Context, c *rpcclient.Client, id string, from int64) (watchFeed, error) {
	w, err := c.Watch(ctx, id, from)
	if err != nil {
		return nil, fmt.Errorf("chat: watch session %s: %w", id, err)
	}
	return w, nil
}

// openedMsg is the result of opening the session of a new chat.
type openedMsg struct {
	session store.Session
	feed    watchFeed
	err     error
}

// openSession opens the session of a new chat for the outbox's first
// message, unless it is being opened.
func (m *model) openSession() tea.Cmd {
	if m.opening || m.opener == nil || len(m.out.queue) == 0 {
		return nil
	}
	m.opening = true
	m.notice = "creating the session…"
	opener, ctx, first := m.opener, m.ctx, m.out.queue[0].text
	return func() tea.Msg {
		s, feed, err := opener(ctx, first)
		return openedMsg{session: s, feed: feed, err: err}
	}
}

// opened takes the session opened for the first message: its outputs are
// read and the outbox's messages go to it. When it could not be opened,
// the messages waiting for it say why, and the next message typed tries
// again.
func (m *model) opened(msg openedMsg) tea.Cmd {
	m.opening = false
	m.notice = ""
	if msg.err != nil {
		for _, o := range m.out.queue {
			delete(m.open, o.turn)
			m.tr.note(o.turn, "✗ not sent: "+msg.err.Error())
		}
		m.out.queue = nil
		return nil
	}
	m.tgt.session = msg.session
	m.outputs, m.watchErr = msg.feed.Outputs(), msg.feed.Err
	return tea.Batch(waitOutput(m.outputs, m.watchErr), m.sendNext())
}
