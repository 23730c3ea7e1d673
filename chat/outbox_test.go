package chat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// typedMessages are the messages the send tests type, in order.
func typedMessages() []string {
	var texts []string
	for i := 1; i <= 8; i++ {
		texts = append(texts, fmt.Sprintf("message %d", i))
	}
	return texts
}

// Messages typed while the api is unreachable reach it in the order typed,
// each with one turn id however often it is tried; one refused for good
// says why and the others still follow in order.
func TestChatSendsInOrder(t *testing.T) {
	t.Parallel()
	typed := typedMessages()
	refusal := &rpcclient.Error{Code: -32602, Message: "the message is too long"}
	cases := []struct {
		name string
		// block: while down, sends wait for the reconnect (rpcclient with
		// Reconnect); else they fail at once.
		block  bool
		refuse string
		want   []string
		shows  string
	}{
		{name: "sends wait for the reconnect", block: true, want: typed},
		{name: "sends fail until the api is back", want: typed},
		{name: "a refused message says why and the others follow", block: true, refuse: "message 3",
			want: slices.Delete(slices.Clone(typed), 2, 3), shows: "✗ not sent: rpc error -32602: the message is too long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFakePlanner(true, c.block)
			if c.refuse != "" {
				f.refuse[c.refuse] = refusal
			}
			r := newScreenRun(t, f, nil, map[string]string{})
			r.m.retryBase = time.Millisecond
			for _, text := range typed {
				r.typeMessage(text)
			}
			if c.block {
				r.until("the sends to wait for the connection", func() bool { return r.idle(f) })
			} else {
				r.until("the first message to be tried three times, or given up", func() bool {
					return f.triesOf(typed[0]) >= 3 || strings.Contains(r.screen(), "✗ not sent")
				})
			}
			if !c.block && !strings.Contains(r.screen(), "will send again: rpcclient: planner.send: rpcclient: disconnected") {
				t.Errorf("while the api is down the screen does not say the message waits:\n%s", r.screen())
			}
			f.reconnect()
			r.until("the messages to reach the server, or one given up", func() bool {
				return len(f.received()) >= len(c.want) || (c.refuse == "" && strings.Contains(r.screen(), "✗ not sent"))
			})
			screen := r.screen()
			if got := f.received(); !slices.Equal(got, c.want) {
				t.Fatalf("the server got %q, want %q; the screen:\n%s", got, c.want, screen)
			}
			for _, text := range typed {
				if n := f.turnsOf(text); n != 1 {
					t.Errorf("%q was sent with %d turn ids, want 1", text, n)
				}
			}
			at := 0
			for _, text := range typed {
				i := strings.Index(screen[at:], "you › "+text)
				if i < 0 {
					t.Fatalf("the screen lacks %q after the messages before it:\n%s", text, screen)
				}
				at += i
			}
			if c.shows != "" && !strings.Contains(screen, c.shows) {
				t.Errorf("the screen lacks %q:\n%s", c.shows, screen)
			}
			if c.refuse == "" && strings.Contains(screen, "✗ not sent") {
				t.Errorf("the screen shows a message not sent:\n%s", screen)
			}
			if strings.Contains(screen, "will send again") {
				t.Errorf("the screen still says a message waits:\n%s", screen)
			}
		})
	}
}

// Piped lines reach the server in order, each once, while the api is
// unreachable too, and their answers print in that order.
func TestChatPlainSendsInOrder(t *testing.T) {
	t.Parallel()
	typed := typedMessages()
	for _, block := range []bool{true, false} {
		name := map[bool]string{true: "sends wait for the reconnect", false: "sends fail until the api is back"}[block]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakePlanner(true, block)
			f.feed = make(chan rpcclient.Output, 3*len(typed))
			tgt := target{project: store.Project{Key: "DEMO"}, session: store.Session{ID: "s1"}}
			var out bytes.Buffer
			done := make(chan error, 1)
			go func() {
				lines := readLines(t.Context(), strings.NewReader(strings.Join(typed, "\n")+"\n"))
				done <- runPlain(t.Context(), f, fakeFeed{ch: f.feed}, nil, tgt,
					plainIO{lines: lines, out: &out, errOut: io.Discard})
			}()
			storetest.WaitFor(t, "the first line to be sent, or the chat to end", func() bool {
				if len(done) > 0 {
					return true
				}
				if block {
					return f.waiting() > 0
				}
				return f.triesOf(typed[0]) >= 2
			})
			f.reconnect()
			var err error
			select {
			case err = <-done:
			case <-time.After(storetest.WaitTimeout):
				t.Fatalf("plain chat did not end within %s; the server got %q", storetest.WaitTimeout, f.received())
			}
			if err != nil {
				t.Fatalf("plain chat: %v; the server got %q", err, f.received())
			}
			if got := f.received(); !slices.Equal(got, typed) {
				t.Fatalf("the server got %q, want %q", got, typed)
			}
			var want []string
			for _, text := range typed {
				want = append(want, "assistant: answer to "+text, "done: end_turn")
				if n := f.turnsOf(text); n != 1 {
					t.Errorf("%q was sent with %d turn ids, want 1", text, n)
				}
			}
			if got := strings.TrimSpace(out.String()); got != strings.Join(want, "\n") {
				t.Fatalf("printed:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
}

// A send is tried again, with its turn id, only when the connection was
// lost or the server asked to come back later, after the wait it asked for
// or a doubling one.
func TestChatSendRetry(t *testing.T) {
	t.Parallel()
	busy := func(code string, after any) error {
		return &rpcclient.Error{Code: -32603, Message: "later", Data: map[string]any{"code": code, "retry_after": after}}
	}
	cases := []struct {
		name  string
		err   error
		retry bool
		hint  time.Duration
	}{
		{"lost connection", fmt.Errorf("rpcclient: planner.send: %w", rpcclient.ErrDisconnected), true, 0},
		{"unavailable (json)", busy("unavailable", float64(2)), true, 2 * time.Second},
		{"rate limited (msgpack)", busy("resource_exhausted", int8(1)), true, time.Second},
		{"rate limited without a wait", busy("resource_exhausted", nil), true, 0},
		{"refused", &rpcclient.Error{Code: -32602, Message: "too long", Data: map[string]any{"code": "invalid"}}, false, 0},
		{"internal", busy("internal", nil), false, 0},
		{"cancelled", fmt.Errorf("rpcclient: planner.send: %w", context.Canceled), false, 0},
		{"other", errors.New("boom"), false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if hint, retry := sendRetry(c.err); retry != c.retry || hint != c.hint {
				t.Fatalf("sendRetry = %s, %v; want %s, %v", hint, retry, c.hint, c.retry)
			}
		})
	}
	waits := []struct {
		tries int
		hint  time.Duration
		want  time.Duration
	}{
		{1, 0, sendRetryBase}, {2, 0, 2 * sendRetryBase}, {3, 0, 4 * sendRetryBase}, {30, 0, sendRetryMax},
		{1, time.Second, time.Second}, {1, time.Hour, sendRetryMax},
	}
	for _, w := range waits {
		if got := retryWait(0, w.tries, w.hint); got != w.want {
			t.Errorf("retryWait(0, %d, %s) = %s, want %s", w.tries, w.hint, got, w.want)
		}
	}
}
