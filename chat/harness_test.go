package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// screenRun runs a chat screen as Bubble Tea does: each command in a
// goroutine of its own, and each message it returns through Update, one
// at a time, on the test's goroutine.
type screenRun struct {
	t    *testing.T
	m    model
	feed chan rpcclient.Output
	msgs chan tea.Msg
	// running counts the commands that have not returned yet.
	running atomic.Int64
	stop    chan struct{}
}

// newScreenRun is a chat screen of session s1 on conn, 100×60, with no
// command run yet.
func newScreenRun(t *testing.T, conn plannerConn, rest *restClient, human map[string]string) *screenRun {
	t.Helper()
	tgt := target{project: store.Project{Key: "DEMO"}, session: store.Session{ID: "s1", Title: "Plan"}, human: human}
	r := &screenRun{t: t, feed: make(chan rpcclient.Output), msgs: make(chan tea.Msg, 1024), stop: make(chan struct{})}
	r.m = newModel(t.Context(), conn, rest, fakeFeed{ch: r.feed}, nil, tgt, nil)
	t.Cleanup(func() { close(r.stop) })
	r.update(tea.WindowSizeMsg{Width: 100, Height: 60})
	return r
}

// update hands msg to the screen and runs the command it returns.
func (r *screenRun) update(msg tea.Msg) {
	if b, ok := msg.(tea.BatchMsg); ok {
		for _, cmd := range b {
			r.exec(cmd)
		}
		return
	}
	next, cmd := r.m.Update(msg)
	r.m = next.(model)
	r.exec(cmd)
}

func (r *screenRun) exec(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	r.running.Add(1)
	go func() {
		defer r.running.Add(-1)
		if msg := cmd(); msg != nil {
			select {
			case r.msgs <- msg:
			case <-r.stop:
			}
		}
	}()
}

// watch starts reading the outputs that output sends.
func (r *screenRun) watch() { r.exec(waitOutput(r.m.outputs, r.m.watchErr)) }

// output sends o to the screen's watch, which watch started.
func (r *screenRun) output(o rpcclient.Output) {
	r.t.Helper()
	for {
		select {
		case r.feed <- o:
			return
		case msg := <-r.msgs:
			r.update(msg)
		case <-time.After(storetest.WaitTimeout):
			r.t.Fatalf("the screen read no output within %s", storetest.WaitTimeout)
		}
	}
}

// typeMessage types text into the composer and presses Enter.
func (r *screenRun) typeMessage(text string) {
	r.update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(text)})
	r.update(tea.KeyMsg{Type: tea.KeyEnter})
}

// screen is what the terminal shows now.
func (r *screenRun) screen() string { return screenText(r.m.View()) }

// until runs the screen's messages until cond holds, and fails the test
// when it does not within storetest.WaitTimeout.
func (r *screenRun) until(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(storetest.WaitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for drained := false; !drained; {
			select {
			case msg := <-r.msgs:
				r.update(msg)
			default:
				drained = true
			}
		}
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out after %s waiting for %s; the screen:\n%s", storetest.WaitTimeout, what, r.screen())
		}
		select {
		case msg := <-r.msgs:
			r.update(msg)
		case <-tick.C:
		}
	}
}

// idle says whether every command still running waits in a send of f, and
// no message waits for Update.
func (r *screenRun) idle(f *fakePlanner) bool {
	n := f.waiting()
	return n > 0 && int64(n) == r.running.Load() && len(r.msgs) == 0
}

// fakePlanner is the planner server behind a connection that can be down.
// Like the server it takes each turn id once, in the order the sends reach
// it, and with feed set it answers each turn it takes there.
type fakePlanner struct {
	mu sync.Mutex
	// down fails each send, or with block makes it wait for reconnect, as
	// rpcclient does with Reconnect.
	down, block bool
	refuse      map[string]error // texts refused for good
	feed        chan rpcclient.Output
	waiters     []*fakeSend
	taken       map[string]bool            // turn ids
	got         []string                   // texts taken, in order
	tries       map[string]int             // sends of each text
	turns       map[string]map[string]bool // the turn ids each text was sent with
	cancels     []string
}

type fakeSend struct {
	text, turn string
	err        error
	done       chan struct{}
}

func newFakePlanner(down, block bool) *fakePlanner {
	return &fakePlanner{down: down, block: block, refuse: map[string]error{}, taken: map[string]bool{},
		tries: map[string]int{}, turns: map[string]map[string]bool{}}
}

func (f *fakePlanner) SendMultitask(ctx context.Context, _, text, turn, _ string) (rpcclient.SendResult, error) {
	f.mu.Lock()
	f.tries[text]++
	if f.turns[text] == nil {
		f.turns[text] = map[string]bool{}
	}
	f.turns[text][turn] = true
	switch {
	case f.down && !f.block:
		f.mu.Unlock()
		return rpcclient.SendResult{}, fmt.Errorf("rpcclient: planner.send: %w", rpcclient.ErrDisconnected)
	case f.down:
		w := &fakeSend{text: text, turn: turn, done: make(chan struct{})}
		f.waiters = append(f.waiters, w)
		f.mu.Unlock()
		select {
		case <-w.done:
		case <-ctx.Done():
			return rpcclient.SendResult{}, ctx.Err()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return rpcclient.SendResult{Turn: turn}, w.err
	}
	defer f.mu.Unlock()
	return rpcclient.SendResult{Turn: turn}, f.take(text, turn)
}

func (f *fakePlanner) Cancel(_ context.Context, _, turn string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, turn)
	return nil
}

// take stores a message, under f.mu.
func (f *fakePlanner) take(text, turn string) error {
	if err := f.refuse[text]; err != nil {
		return err
	}
	if f.taken[turn] {
		return nil
	}
	f.taken[turn] = true
	f.got = append(f.got, text)
	if f.feed != nil {
		human, _ := json.Marshal([]store.Block{{Type: store.BlockText, Text: text}})
		answer, _ := json.Marshal([]store.Block{{Type: store.BlockText, Text: "answer to " + text}})
		f.feed <- rpcclient.Output{Turn: turn, Type: store.OutputQueued, Role: "user", Content: human}
		f.feed <- rpcclient.Output{Turn: turn, Type: store.OutputMessage, Role: "assistant", Content: answer}
		f.feed <- rpcclient.Output{Turn: turn, Type: store.OutputDone, Text: store.ReasonEndTurn}
	}
	return nil
}

// reconnect brings the connection back. The sends that waited for it go
// through in the reverse of the order they came in: nothing orders
// requests that wait for a connection.
func (f *fakePlanner) reconnect() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
	for i := len(f.waiters) - 1; i >= 0; i-- {
		w := f.waiters[i]
		w.err = f.take(w.text, w.turn)
		close(w.done)
	}
	f.waiters = nil
}

func (f *fakePlanner) waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

func (f *fakePlanner) triesOf(text string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tries[text]
}

// received is the texts the server took, in order.
func (f *fakePlanner) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// turnsOf is how many turn ids text was sent with.
func (f *fakePlanner) turnsOf(text string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.turns[text])
}
