package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

// sseEnv is an api with a planner and a hub, and, given a script, a worker
// answering from the scripted fake model; with one session of "engineer".
type sseEnv struct {
	*env
	hub     *tasks.Hub
	rdb     redis.UniversalClient
	ns      string // the Redis namespace
	session string
}

func newSSEEnv(t *testing.T, script string) *sseEnv {
	t.Helper()
	e := &sseEnv{env: newEnv(t)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	e.restart(t, func(t *testing.T, d *api.Deps, ns string) {
		d.Log = log
		names := tasks.Names{Namespace: ns}
		q := tasks.NewQueue(d.Redis, names, time.Minute)
		t.Cleanup(q.Close)
		pub := tasks.NewPublisher(d.Redis, names, log)
		d.Planner = tasks.NewPlanner(d.DB, q, pub, store.QueueLimits{Total: 1000, PerProject: 1000}, log)
		e.hub = tasks.NewHub(d.DB, d.Redis, names, log)
		d.Hub, e.rdb, d.RedisNamespace, e.ns = e.hub, d.Redis, ns, ns
		if script != "" {
			startWorker(t, d, q, pub, script)
		}
	})
	r := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "sse"}).expect(t, 201)
	e.session = r.Body["id"].(string)
	return e
}

// startWorker runs a worker on the api's database and Redis until the test
// ends, its model the scripted fake.
func startWorker(t *testing.T, d *api.Deps, q *tasks.Queue, pub *tasks.Publisher, script string) {
	t.Helper()
	fake := fakellm.New(fakellm.MustParse(script))
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	reg, err := tools.Planner(d.Log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := worker.DefaultConfig()
	cfg.Concurrency, cfg.Lease, cfg.TaskCheckInterval = 4, 2*time.Second, 20*time.Millisecond
	pc := worker.DefaultPlannerConfig()
	pc.Model = "fake-model"
	w, err := worker.New(cfg, pc, 2*time.Second, worker.Deps{DB: d.DB, Redis: d.Redis, Queue: q, Publisher: pub,
		Tools: reg, Log: d.Log, Registry: prometheus.NewRegistry(),
		Model: worker.GatewayModel{Client: llm.NewClient(fake.URL(), []byte("test-key"), nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

// sseEvent is one server-sent event; Comment is set for a comment line.
type sseEvent struct {
	ID, Event, Data, Comment string
}

// output decodes an event's data.
func (ev sseEvent) output(t *testing.T) store.Output {
	t.Helper()
	var o store.Output
	if err := json.Unmarshal([]byte(ev.Data), &o); err != nil {
		t.Fatalf("event data %q: %v", ev.Data, err)
	}
	return o
}

// sseStream reads a response's events in the background.
type sseStream struct {
	res    *http.Response
	events chan sseEvent
}

// stream opens the outputs route as an event stream; header pairs are
// added to the request. It fails t unless the answer is 200.
func (e *sseEnv) stream(t *testing.T, who, query string, header ...string) *sseStream {
	t.Helper()
	res := e.streamRequest(t, who, query, header...)
	if res.StatusCode != 200 {
		t.Fatalf("stream: status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream: content type %q", ct)
	}
	s := &sseStream{res: res, events: make(chan sseEvent, 10000)}
	t.Cleanup(func() { _ = res.Body.Close() })
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.Comment = strings.TrimSpace(line[1:])
			default:
				k, v, _ := strings.Cut(line, ": ")
				switch k {
				case "id":
					ev.ID = v
				case "event":
					ev.Event = v
				case "data":
					ev.Data = v
				}
			}
		}
	}()
	return s
}

func (e *sseEnv) streamRequest(t *testing.T, who, query string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+"/api/v1/planner/sessions/"+e.session+"/outputs"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// until reads events up to and including the first that stop accepts; it
// fails t when the stream ends or stalls first.
func (s *sseStream) until(t *testing.T, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var got []sseEvent
	timeout := time.NewTimer(storetest.WaitTimeout)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended after %d events: %+v", len(got), got)
			}
			if ev.Comment != "" && ev.Event == "" {
				continue
			}
			got = append(got, ev)
			if stop(ev) {
				return got
			}
		case <-timeout.C:
			t.Fatalf("stream stalled after %d events: %+v", len(got), got)
		}
	}
}

func isDone(ev sseEvent) bool { return ev.Event == store.OutputDone }

// stored checks that the stored events carry consecutive cursors from
// first, each once, with created_at, and returns their types.
func stored(t *testing.T, evs []sseEvent, first int64) []string {
	t.Helper()
	var types []string
	want := first
	for _, ev := range evs {
		o := ev.output(t)
		if ev.Event != o.Type {
			t.Fatalf("event %q carries an output of type %q", ev.Event, o.Type)
		}
		if o.Type == store.OutputText {
			if ev.ID != "" || o.Cursor != 0 {
				t.Fatalf("text event with id %q", ev.ID)
			}
			continue
		}
		if ev.ID != strconv.FormatInt(want, 10) || o.Cursor != want {
			t.Fatalf("event id %q (cursor %d), want %d: %+v", ev.ID, o.Cursor, want, evs)
		}
		if o.CreatedAt.IsZero() {
			t.Fatalf("stored output %d without created_at: %s", o.Cursor, ev.Data)
		}
		want++
		types = append(types, o.Type)
	}
	return types
}

const sseScript = `
answers:
  - content:
      - text: "Let me look at the backlog first."
      - tool_use: {name: list_items, input: {kind: ticket}}
    chunk_size: 3
  - content:
      - text: "The backlog is empty; shall I propose a first milestone?"
    chunk_size: 3
`

func TestPlannerSSEFollowsATurnAndResumes(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, sseScript)
	live := e.stream(t, "viewer", "")
	e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer", map[string]any{"text": "What is next?"}).expect(t, 202)
	evs := live.until(t, isDone)
	types := strings.Join(stored(t, evs, 1), ",")
	if want := "queued,started,message,tool_call,tool_result,message,message,done"; types != want {
		t.Fatalf("stored outputs %s, want %s", types, want)
	}
	var text strings.Builder
	var messages []store.Output
	for _, ev := range evs {
		o := ev.output(t)
		switch o.Type {
		case store.OutputText:
			text.WriteString(o.Text)
		case store.OutputMessage:
			messages = append(messages, o)
		}
	}
	if want := "Let me look at the backlog first.The backlog is empty; shall I propose a first milestone?"; text.String() != want {
		t.Fatalf("streamed text %q, want %q", text.String(), want)
	}
	// Each message output carries the message: the answer with its tool call,
	// the tool result, the final answer.
	if m := messages[0]; m.Role != "assistant" || len(m.Content) != 2 || m.Content[0].Text != "Let me look at the backlog first." ||
		m.Content[1].Type != store.BlockToolUse || m.Content[1].Name != "list_items" {
		t.Fatalf("first message output %+v", m)
	}
	if m := messages[1]; m.Role != "user" || len(m.Content) != 1 || m.Content[0].Type != store.BlockToolResult {
		t.Fatalf("tool result message output %+v", m)
	}
	if m := messages[2]; m.Role != "assistant" || m.Content[0].Text != "The backlog is empty; shall I propose a first milestone?" {
		t.Fatalf("final message output %+v", m)
	}

	// Resuming after any cursor replays exactly the rest, then goes live.
	tests := []struct {
		name   string
		query  string
		header []string
		first  int64
	}{
		{"Last-Event-ID", "", []string{"Last-Event-ID", "3"}, 4},
		{"Last-Event-ID wins over from_cursor", "?from_cursor=1", []string{"Last-Event-ID", "6"}, 7},
		{"from_cursor", "?from_cursor=5", nil, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := e.stream(t, "viewer", tt.query, tt.header...)
			got := s.until(t, isDone)
			if n := len(stored(t, got, tt.first)); int64(n) != 8-tt.first+1 || len(got) != n {
				t.Fatalf("resumed after %d: %+v", tt.first-1, got)
			}
		})
	}
	// The JSON form is unchanged in shape, and carries the same fields.
	r := e.do("GET", "/api/v1/planner/sessions/"+e.session+"/outputs", "viewer", nil).expect(t, 200)
	items := r.Body["items"].([]any)
	if len(items) != 8 {
		t.Fatalf("JSON outputs %s", r.Raw)
	}
	msg := items[2].(map[string]any)
	if msg["type"] != "message" || msg["role"] != "assistant" || msg["content"] == nil || msg["created_at"] == nil {
		t.Fatalf("JSON message output %v", msg)
	}
}

// A reconnect of the hub's Redis connection during a turn: the stream
// still carries every stored output exactly once. The first answer holds
// after its first deltas until the connection has been killed.
func TestPlannerSSESurvivesAHubReconnectMidTurn(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newSSEEnv(t, `
answers:
  - content:
      - text: "Reading the backlog, one small piece at a time, so that this takes a while."
      - tool_use: {name: list_items, input: {}}
    chunk_size: 2
    chunk_latency: 10ms
    hold_after: 3
    hold_until: `+strconv.Quote(release)+`
  - content:
      - text: "Done reading; nothing is planned yet, so here is a fresh start."
    chunk_size: 2
    chunk_latency: 10ms
`)
	live := e.stream(t, "viewer", "")
	e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer", map[string]any{"text": "Plan"}).expect(t, 202)
	live.until(t, func(ev sseEvent) bool { return ev.Event == store.OutputText })
	kills := 0
	for _, line := range strings.Split(e.rdb.ClientList(context.Background()).Val(), "\n") {
		if strings.Contains(line, " name="+e.hub.ClientName()+" ") {
			id := regexp.MustCompile(`^id=(\d+)`).FindStringSubmatch(line)[1]
			if err := e.rdb.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			kills++
		}
	}
	if kills != 1 {
		t.Fatalf("%d hub connections found, want 1", kills)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rest := live.until(t, isDone)
	var storedEvs []sseEvent
	for _, ev := range rest {
		if ev.Event != store.OutputText {
			storedEvs = append(storedEvs, ev)
		}
	}
	first, _ := strconv.ParseInt(storedEvs[0].ID, 10, 64)
	if first > 3 {
		t.Fatalf("stream resumed at %d, after a gap: %+v", first, rest)
	}
	types := strings.Join(stored(t, storedEvs, first), ",")
	if !strings.HasSuffix("started,message,tool_call,tool_result,message,message,done", types) {
		t.Fatalf("after the reconnect %s", types)
	}
	storetest.WaitFor(t, "a resync", func() bool { return e.hub.Stats().Resyncs >= 1 })
}

func TestPlannerSSERefusals(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, "")
	tests := []struct {
		name, who, query string
		header           []string
		status           int
		msg              string
	}{
		{"Last-Event-ID not a number", "viewer", "", []string{"Last-Event-ID", "abc"}, 400, "Last-Event-ID: must be a non-negative integer"},
		{"Last-Event-ID negative", "viewer", "", []string{"Last-Event-ID", "-1"}, 400, "Last-Event-ID: must be a non-negative integer"},
		{"from_cursor negative", "viewer", "?from_cursor=-1", nil, 400, "from_cursor: must be a non-negative integer"},
		{"other organization", "outsider", "", nil, 404, "not found"},
		{"no token", "", "", nil, 401, "bearer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.streamRequest(t, tt.who, tt.query, tt.header...)
			defer res.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(res.Body).Decode(&body)
			msg, _ := body["message"].(string)
			if res.StatusCode != tt.status || !strings.Contains(msg, tt.msg) {
				t.Fatalf("status %d %q, want %d containing %q", res.StatusCode, msg, tt.status, tt.msg)
			}
		})
	}
	if st := e.hub.Stats(); st.Channels != 0 || st.Watchers != 0 {
		t.Fatalf("refused streams left %+v", st)
	}
	// An api without a hub says so.
	plain := newEnv(t)
	plain.restart(t, withPlanner())
	sess := plain.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "x"}).expect(t, 201).Body["id"].(string)
	req, _ := http.NewRequest("GET", "http://"+plain.srv.Addr()+"/api/v1/planner/sessions/"+sess+"/outputs", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+plain.tokens["viewer"])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 {
		t.Fatalf("without a hub: %d, want 503", res.StatusCode)
	}
}

// A stream ends when its client leaves (the watch is released) and when
// the server shuts down (with a closed event saying so).
func TestPlannerSSEEndsWhenTheClientLeavesAndOnShutdown(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, "")
	gone := e.stream(t, "viewer", "")
	storetest.WaitFor(t, "the stream's watch", func() bool { return e.hub.Stats().Watchers == 1 })
	_ = gone.res.Body.Close()
	storetest.WaitFor(t, "the hub to release the departed client's watch", func() bool {
		// Each output published is a write that finds the client gone.
		e.do("POST", "/api/v1/planner/sessions/"+e.session+"/messages", "engineer", map[string]any{"text": "hello"})
		return e.hub.Stats().Watchers == 0
	})
	s := e.stream(t, "viewer", "")
	s.until(t, func(ev sseEvent) bool { return ev.Event == store.OutputQueued })
	stopped := make(chan struct{})
	go func() { e.srv.Stop(); close(stopped) }()
	last := s.until(t, func(ev sseEvent) bool { return ev.Event == "closed" })
	if ev := last[len(last)-1]; ev.Data != `{"reason":"shutdown"}` {
		t.Fatalf("closing event %+v", ev)
	}
	<-stopped
	if st := e.hub.Stats(); st.Watchers != 0 {
		t.Fatalf("after shutdown %+v", st)
	}
}
