package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// dashEnv is an api with a planner and the queue dashboard, and a worker
// answering from the scripted fake model; engineer owns two sessions.
type dashEnv struct {
	*env
	rdb      redis.UniversalClient
	names    tasks.Names
	sessions [2]string
}

func newDashEnv(t *testing.T, script string, opts ...tasks.QueueOption) *dashEnv {
	t.Helper()
	e := &dashEnv{env: newEnv(t)}
	conn, err := taskstest.Config(t).AsynqConnOpt()
	if err != nil {
		t.Fatal(err)
	}
	mon := api.NewMonitoring(conn)
	t.Cleanup(func() { _ = mon.Close() })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	e.restart(t, func(t *testing.T, d *api.Deps, ns string) {
		d.Log, d.Monitoring, e.rdb = log, mon, d.Redis
		e.names = tasks.Names{Namespace: ns}
		q := tasks.NewQueue(d.Redis, e.names, time.Minute, opts...)
		t.Cleanup(q.Close)
		pub := tasks.NewPublisher(d.Redis, e.names, log)
		d.Planner = tasks.NewPlanner(d.DB, q, pub, store.QueueLimits{Total: 1000, PerProject: 1000}, log)
		startWorker(t, d, q, pub, script)
	})
	for i := range e.sessions {
		r := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": fmt.Sprint("s", i)}).expect(t, 201)
		e.sessions[i] = r.Body["id"].(string)
	}
	return e
}

// send sends text to session i as engineer and returns the turn.
func (e *dashEnv) send(t *testing.T, i int, text string) string {
	t.Helper()
	r := e.do("POST", "/api/v1/planner/sessions/"+e.sessions[i]+"/messages", "engineer", map[string]any{"text": text}).expect(t, 202)
	return r.Body["turn"].(string)
}

// dones are the texts of the turn's done outputs, as its session's
// watchers read them.
func (e *dashEnv) dones(t *testing.T, i int, turn string) []string {
	t.Helper()
	r := e.do("GET", "/api/v1/planner/sessions/"+e.sessions[i]+"/outputs?from_cursor=0", "engineer", nil).expect(t, 200)
	var out []string
	for _, o := range r.Body["items"].([]any) {
		m := o.(map[string]any)
		if m["turn"] == turn && m["type"] == store.OutputDone {
			out = append(out, m["text"].(string))
		}
	}
	return out
}

// status is the turn's status in Postgres.
func (e *dashEnv) status(t *testing.T, turn string) string {
	t.Helper()
	var s string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT status FROM planner_turns WHERE id = $1`, turn).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// dashTask is a task as the dashboard's api lists it.
type dashTask struct {
	ID, Type, Payload, Result string
}

// tasksOf lists a queue's tasks in a state through the dashboard's api.
func (e *env) tasksOf(t *testing.T, queue, state string) []dashTask {
	t.Helper()
	r := e.do("GET", "/monitoring/api/queues/"+queue+"/"+state+"_tasks?page=1&size=100", "platform", nil)
	if r.Status == 500 && strings.Contains(string(r.Raw), "queue not found") {
		return nil // no task was ever enqueued there: asynqmon's answer
	}
	r.expect(t, 200)
	var out []dashTask
	for _, x := range r.Body["tasks"].([]any) {
		m := x.(map[string]any)
		res, _ := m["result"].(string)
		out = append(out, dashTask{ID: m["id"].(string), Type: m["type"].(string), Payload: m["payload"].(string), Result: res})
	}
	return out
}

// taskOfTurn is the id of the turn's task in the state, "" if none.
func (e *dashEnv) taskOfTurn(t *testing.T, state, turn string) string {
	t.Helper()
	for _, task := range e.tasksOf(t, e.names.Queue(), state) {
		if strings.Contains(task.Payload, `"turn":"`+turn+`"`) {
			return task.ID
		}
	}
	return ""
}

// noTaskOf fails unless no live task of the turn is in the planner queue.
func (e *dashEnv) noTaskOf(t *testing.T, turn string) {
	t.Helper()
	for _, state := range []string{"pending", "active", "scheduled", "retry", "archived"} {
		if id := e.taskOfTurn(t, state, turn); id != "" {
			t.Errorf("turn %s still has task %s %s", turn, id, state)
		}
	}
}

// TestDashboardCancelStopsARunningTurn: Cancel on a running turn's task in
// the dashboard cancels the turn for good. It ends with done "cancelled",
// the one done it gets: it does not resume (asynq's own cancel handed the
// turn back and it resumed as <turn>:resume:1 and answered).
func TestDashboardCancelStopsARunningTurn(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newDashEnv(t, fmt.Sprintf(`
answers:
  - hold_until: %q
    content: [{text: "a long answer that never ends"}]
  - content: [{text: "resumed and answered"}]
  - content: [{text: "the next turn"}]
`, release))
	turn := e.send(t, 0, "start a long answer")
	var task string
	storetest.WaitFor(t, "the turn's task active in the dashboard", func() bool {
		task = e.taskOfTurn(t, "active", turn)
		return task != "" && e.status(t, turn) == string(store.TurnRunning)
	})
	res := dashboardRequest(t, e.env, "POST", "/monitoring/api/queues/"+e.names.Queue()+"/active_tasks/"+task+":cancel", "")
	if want := "Turn " + turn + ` is stopping: its worker ends it with done "cancelled".`; res.status != 204 || res.notice != want {
		t.Fatalf("cancel: %d %s, notice %q; want 204 and %q", res.status, res.body, res.notice, want)
	}
	storetest.WaitFor(t, "the turn ends", func() bool { return len(e.dones(t, 0, turn)) > 0 })
	if got := e.dones(t, 0, turn); len(got) != 1 || got[0] != store.ReasonCancelled {
		t.Fatalf("done outputs %q, want one done %q", got, store.ReasonCancelled)
	}
	if s := e.status(t, turn); s != string(store.TurnCancelled) {
		t.Fatalf("turn status %s, want cancelled", s)
	}
	storetest.WaitFor(t, "the cancelled turn's task gone", func() bool { return e.taskOfTurn(t, "active", turn) == "" })
	// Whatever held the model answers now; the session's next turn runs
	// and answers, and the cancelled one has not come back.
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	next := e.send(t, 0, "and now?")
	storetest.WaitFor(t, "the next turn answered", func() bool { return len(e.dones(t, 0, next)) > 0 })
	if got := e.dones(t, 0, turn); len(got) != 1 || got[0] != store.ReasonCancelled {
		t.Fatalf("after the next turn, the cancelled turn's done outputs are %q", got)
	}
	e.noTaskOf(t, turn)
}

// TestDashboardCancelTellsWhatItDid: the dashboard's answer to Cancel
// carries what became of the turn, which the dashboard shows.
func TestDashboardCancelTellsWhatItDid(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newDashEnv(t, fmt.Sprintf("answers:\n  - hold_until: %q\n    content: [{text: held}]\n", release))
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o600) })
	turn := e.send(t, 1, "hold on")
	var task string
	storetest.WaitFor(t, "the turn's task active", func() bool {
		task = e.taskOfTurn(t, "active", turn)
		return task != "" && e.status(t, turn) == string(store.TurnRunning)
	})
	res := dashboardRequest(t, e.env, "POST", "/monitoring/api/queues/"+e.names.Queue()+"/active_tasks:batch_cancel",
		`{"task_ids":["`+task+`","no-such-task"]}`)
	if res.status != 200 {
		t.Fatalf("batch cancel: %d %s", res.status, res.body)
	}
	if want := `Turns cancelled: 0; stopping: 1 (their workers end them); each ends with done "cancelled". Tasks of turns that had already ended: 0.`; res.notice != want {
		t.Errorf("Ballet-Notice %q, want %q", res.notice, want)
	}
	for _, want := range []string{`"canceled_ids":["` + task + `"]`, `"error_ids":["no-such-task"]`, `"id":"no-such-task"`, "is not in queue"} {
		if !strings.Contains(res.body, want) {
			t.Errorf("body %s lacks %s", res.body, want)
		}
	}
	storetest.WaitFor(t, "the turn ends and its task is gone", func() bool {
		return len(e.dones(t, 1, turn)) > 0 && e.taskOfTurn(t, "active", turn) == ""
	})
	// Cancel again: the task is gone, which the answer says; nothing changes.
	r := e.do("POST", "/monitoring/api/queues/"+e.names.Queue()+"/active_tasks/"+task+":cancel", "platform", nil).expect(t, 404)
	if !strings.Contains(r.message(), "is not in queue "+e.names.Queue()) {
		t.Errorf("message %q", r.message())
	}
	if got := e.dones(t, 1, turn); len(got) != 1 || got[0] != store.ReasonCancelled {
		t.Fatalf("done outputs %q", got)
	}
}

// dashReply is a dashboard api answer with its notice header.
type dashReply struct {
	status       int
	body, notice string
}

// dashboardRequest sends a JSON body ("" sends none) to the dashboard's api
// as the platform admin.
func dashboardRequest(t *testing.T, e *env, method, path, body string) dashReply {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.srv.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.tokens["platform"])
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return dashReply{status: res.StatusCode, body: string(raw), notice: res.Header.Get("Ballet-Notice")}
}

// pausedEnv is a dashEnv whose planner queue the dashboard paused, with a
// turn of each session dispatched and pending there.
func pausedEnv(t *testing.T) (e *dashEnv, turns, taskIDs [2]string) {
	t.Helper()
	e = newDashEnv(t, "loop: true\nanswers:\n  - content: [{text: answered}]\n")
	// Pause is asynq's own and does what it says: no worker takes a task.
	e.do("POST", "/monitoring/api/queues/"+e.names.Queue()+":pause", "platform", nil).expect(t, 204)
	for i := range turns {
		turns[i] = e.send(t, i, fmt.Sprint("question ", i))
	}
	storetest.WaitFor(t, "both turns' tasks pending", func() bool {
		for i := range turns {
			taskIDs[i] = e.taskOfTurn(t, "pending", turns[i])
		}
		return taskIDs[0] != "" && taskIDs[1] != ""
	})
	return e, turns, taskIDs
}

// TestDashboardDeleteCancelsAPendingTurn: Delete on a pending turn's task
// cancels the turn (done "cancelled" at once) and deletes the task, one
// task or a selection; the turn is not enqueued again (asynq's own delete
// left the turn queued in Postgres, and the sweeper enqueued it again).
func TestDashboardDeleteCancelsAPendingTurn(t *testing.T) {
	t.Parallel()
	e, turns, ids := pausedEnv(t)
	q := "/monitoring/api/queues/" + e.names.Queue()

	res := dashboardRequest(t, e.env, "DELETE", q+"/pending_tasks/"+ids[0], "")
	if res.status != 204 || res.notice != "Turn "+turns[0]+` is cancelled: it ended with done "cancelled".` {
		t.Fatalf("delete: %d %s, notice %q", res.status, res.body, res.notice)
	}
	if got := e.dones(t, 0, turns[0]); len(got) != 1 || got[0] != store.ReasonCancelled {
		t.Fatalf("done outputs %q, want one done cancelled", got)
	}
	res = dashboardRequest(t, e.env, "POST", q+"/pending_tasks:batch_delete", `{"task_ids":["`+ids[1]+`","no-such-task"]}`)
	for _, want := range []string{`"deleted_ids":["` + ids[1] + `"]`, `"failed_ids":["no-such-task"]`, "no-such-task", "is not in queue"} {
		if res.status != 200 || !strings.Contains(res.body, want) {
			t.Errorf("batch delete: %d %s, want %s", res.status, res.body, want)
		}
	}
	for i, turn := range turns {
		if s := e.status(t, turn); s != string(store.TurnCancelled) {
			t.Errorf("turn %d: status %s, want cancelled", i, s)
		}
		e.noTaskOf(t, turn)
	}
	// The queue resumed, the workers run the sessions' next turns, and the
	// cancelled turns do not come back.
	e.do("POST", q+":resume", "platform", nil).expect(t, 204)
	for i := range turns {
		next := e.send(t, i, "and then?")
		storetest.WaitFor(t, "the next turn answered", func() bool { return len(e.dones(t, i, next)) > 0 })
	}
	for i, turn := range turns {
		if got := e.dones(t, i, turn); len(got) != 1 || got[0] != store.ReasonCancelled {
			t.Errorf("turn %d: done outputs %q after the next turns ran", i, got)
		}
		e.noTaskOf(t, turn)
	}
}

// TestDashboardRefusesWhatItCannotHonour: the dashboard's buttons that
// cannot be honoured, or that are not a platform admin's, are refused with
// the reason, and change nothing: the turns stay queued, their tasks
// pending.
func TestDashboardRefusesWhatItCannotHonour(t *testing.T) {
	t.Parallel()
	e, turns, ids := pausedEnv(t)
	e.tokens["watcher"] = platformViewer(t, e.env)
	planner, embed := "/monitoring/api/queues/"+e.names.Queue(), "/monitoring/api/queues/"+e.names.EmbedQueue()
	// A task in the planner queue that runs no turn.
	if _, err := asynq.NewClientFromRedisClient(e.rdb).Enqueue(asynq.NewTask("other:type", []byte(`{}`)),
		asynq.Queue(e.names.Queue()), asynq.TaskID("odd-task")); err != nil {
		t.Fatal(err)
	}
	task := planner + "/pending_tasks/" + ids[0]
	tests := []struct {
		name, who, method, path, body string
		status                        int
		message                       string
	}{
		{"archive a turn", "platform", "POST", task + ":archive", "", 409,
			"Archive on queue " + e.names.Queue() + " is refused: Postgres owns the turn: archived, its task would be enqueued again"},
		{"archive all", "platform", "POST", planner + "/pending_tasks:archive_all", "", 409, "Postgres owns the turn"},
		{"archive a selection", "platform", "POST", planner + "/pending_tasks:batch_archive", `{"task_ids":["` + ids[0] + `"]}`, 409, "Delete cancels the turn instead"},
		{"archive a retry", "platform", "POST", planner + "/retry_tasks/" + ids[0] + ":archive", "", 409, "Postgres owns the turn"},
		{"delete all", "platform", "DELETE", planner + "/pending_tasks:delete_all", "", 409,
			"Delete all on queue " + e.names.Queue() + " is refused: it would cancel every listed turn of every user"},
		{"delete all archived", "platform", "DELETE", planner + "/archived_tasks:delete_all", "", 409, "Select the turns"},
		{"cancel all", "platform", "POST", planner + "/active_tasks:cancel_all", "", 409, "Cancel all on queue"},
		{"delete the queue", "platform", "DELETE", planner + "?force=true", "", 409, "the workers register their queues again"},
		{"grouped tasks", "platform", "POST", planner + "/groups/g/aggregating_tasks:run_all", "", 409, "ballet groups no tasks"},
		{"delete an embed task", "platform", "DELETE", embed + "/pending_tasks/embed:x:y", "", 409,
			"embedding follows the changes Postgres marks"},
		{"cancel an embed task", "platform", "POST", embed + "/active_tasks/embed:x:y:cancel", "", 409, "search.embeddings_model"},
		{"another deployment's queue", "platform", "DELETE", "/monitoring/api/queues/elsewhere/pending_tasks/" + ids[0], "", 409,
			"it is not a queue of this deployment"},
		{"a task that runs no turn", "platform", "DELETE", planner + "/pending_tasks/odd-task", "", 400,
			`task "odd-task" is a other:type task, not a planner turn`},
		{"not an action of the dashboard", "platform", "POST", task + ":frobnicate", "", 400, "is not an action of the queue dashboard"},
		{"a selection of unknown shape", "platform", "POST", planner + "/pending_tasks:batch_delete", `{"ids":["` + ids[0] + `"]}`, 400, "ids"},
		{"a selection too large", "platform", "POST", planner + "/pending_tasks:batch_delete",
			`{"task_ids":["` + strings.Repeat(`x","`, 1000) + ids[0] + `"]}`, 400, "at most 1000 tasks at once, got 1001"},
		{"a platform viewer", "watcher", "DELETE", task, "", 403, "read-only for you: its buttons are for platform admins"},
		{"an organization admin", "admin", "DELETE", task, "", 403, "roles bound at platform scope"},
		{"nobody", "", "DELETE", task, "", 401, "missing bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, tt.who, rawBody(tt.body))
			r.expect(t, tt.status)
			if !strings.Contains(r.message(), tt.message) {
				t.Errorf("message %q, want it to contain %q", r.message(), tt.message)
			}
			if len(e.tasksOf(t, e.names.Queue(), "pending")) != 3 {
				t.Fatalf("pending tasks %+v, want the two turns' and odd-task", e.tasksOf(t, e.names.Queue(), "pending"))
			}
			for i, turn := range turns {
				if s := e.status(t, turn); s != string(store.TurnQueued) || len(e.dones(t, i, turn)) != 0 {
					t.Fatalf("turn %d is %s after a refusal", i, s)
				}
				if e.taskOfTurn(t, "pending", turn) != ids[i] {
					t.Fatalf("turn %d's task %s is no longer pending", i, ids[i])
				}
			}
		})
	}
}

// rawBody is body as e.do sends it: nil for none.
func rawBody(body string) any {
	if body == "" {
		return nil
	}
	return body
}

// platformViewer binds a viewer at platform scope and returns its token.
func platformViewer(t *testing.T, e *env) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.db.CreateRoleBinding(ctx, "watcher@example.com", store.RoleViewer, store.Scope{Kind: store.ScopePlatform}, store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	tok, _, err := e.db.CreateAPIToken(ctx, "watcher@example.com", "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
