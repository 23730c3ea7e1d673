package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/internal/porttest"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// clusterScript: a message calls list_runnable, then the answer streams in
// chunks; "think slowly" streams the start of an answer and then holds
// until a file exists at the path formatted in, one nobody creates: only a
// cancel ends it, however slow the machine.
const clusterScript = `
loop: true
answers:
  - match: 'tool_result list_runnable'
    chunk_size: 6
    chunk_latency: 30ms
    content:
      - text: "Nothing is runnable yet; start with the backlog grooming."
  - match: '^think slowly'
    chunk_size: 1
    chunk_latency: 50ms
    hold_after: 5
    hold_until: %q
    content:
      - text: "This one takes a long time to think through, one character after another, so that it is cancelled long before its end arrives."
  - content:
      - tool_use: {name: list_runnable, input: {}}
`

// cluster is a running deploy/dev/cluster.sh.
type cluster struct {
	t    *testing.T
	dir  string // the run directory: pids and logs
	base int
	env  []string
}

// clusterBase finds a base port whose ports the script uses are all free,
// below the ephemeral range, where no outgoing connection takes one before
// the script's processes bind it.
func clusterBase(t *testing.T) int {
	t.Helper()
	return porttest.Base(t, 0, 1, 2, 20, 21, 22, 30, 31, 40, 41, 100, 101, 102, 110, 111, 112, 120, 121)
}

// startCluster runs the script with this test binary as ballet, on a
// database and Redis namespace of the test's own, until it says ready; it
// returns the cluster and the demo token.
func startCluster(t *testing.T, extra ...string) (*cluster, string) {
	t.Helper()
	rc := taskstest.Config(t)
	c := &cluster{t: t, dir: t.TempDir(), base: clusterBase(t)}
	c.env = append(cleanEnv(), append([]string{"BALLET_TEST_AS_MAIN=1", "BALLET_DATABASE_URL=" + storetest.URL(t),
		"BALLET_REDIS_URL=" + rc.URL, "BALLET_REDIS_NAMESPACE=" + rc.Namespace, "BALLET_LOG_LEVEL=warn",
		// Eight processes share the test server with the rest of the suite.
		"BALLET_DATABASE_MAX_CONNS=6", "BALLET_DATABASE_SEARCH_MAX_CONNS=2", "BALLET_DATABASE_SEARCH_MAX_CONNS_PER_ORG=1"}, extra...)...)
	cmd := exec.Command("../../deploy/dev/cluster.sh", "--bin", os.Args[0], "--base-port", strconv.Itoa(c.base), "--run-dir", c.dir)
	cmd.Env = c.env
	// Should the test binary die, the script still stops its processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	must(t, err)
	var stderr logtest.Buffer // written by exec's copier while read on failure
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	done := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		c.script(t, "stop") // whatever the script left, restarted processes too
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	var token string
	var said []string
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("cluster.sh ended before it was ready:\n%s\n%s", strings.Join(said, "\n"), stderr.String())
			}
			said = append(said, line)
			if v, ok := strings.CutPrefix(line, "cluster: demo token: "); ok {
				token = v
			}
			if strings.HasPrefix(line, "cluster: ready: ") {
				go func() { // the rest of the output, so that the script never blocks
					for range lines {
					}
				}()
				if token == "" {
					t.Fatalf("cluster.sh printed no demo token:\n%s", strings.Join(said, "\n"))
				}
				return c, token
			}
		case <-deadline:
			t.Fatalf("cluster.sh not ready after 2 minutes:\n%s\n%s", strings.Join(said, "\n"), stderr.String())
		}
	}
}

// script runs cluster.sh with args on this cluster's run directory.
func (c *cluster) script(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("../../deploy/dev/cluster.sh", append(args, "--run-dir", c.dir)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *cluster) api(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.base+i-1) }

// kill SIGKILLs one process of the cluster by name (worker-1, gateway-2).
func (c *cluster) kill(t *testing.T, name string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, name+".pid"))
	must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	must(t, err)
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	storetest.WaitFor(t, name+" to die", func() bool { return syscall.Kill(pid, 0) != nil })
}

// logs is the end of every process's log, for a failure message.
func (c *cluster) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(f), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// clusterSeen collects what the watchers of the sessions saw, by cursor.
type clusterSeen struct {
	mu   sync.Mutex
	seen map[string]map[int64]rpcclient.Output // session → cursor → output
}

func (w *clusterSeen) add(o rpcclient.Output) {
	if o.Cursor == 0 {
		return // a text delta: never stored
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[o.Session] == nil {
		w.seen[o.Session] = map[int64]rpcclient.Output{}
	}
	w.seen[o.Session][o.Cursor] = o
}

// TestClusterOfSeveralProcesses runs deploy/dev/cluster.sh (3 api, 3
// worker, 2 gateway processes) and drives it as users do: sessions are
// sent to through api-1, clusterSeen through api-2 and some turns cancelled
// through api-3, while worker-1 and gateway-2 are SIGKILLed mid-burst
// (gateway-2 is restarted, as a supervisor would). Then Postgres shows
// every accepted turn ended exactly once with contiguous outputs, no tool
// call ran twice, and the watchers saw every stored output.
func TestClusterOfSeveralProcesses(t *testing.T) {
	script := writeFile(t, fmt.Sprintf(clusterScript, filepath.Join(t.TempDir(), "never")))
	c, token := startCluster(t, "BALLET_GATEWAY_FAKE="+script, "BALLET_WORKER_LEASE=3s",
		"BALLET_WORKER_TASK_CHECK_INTERVAL=20ms", "BALLET_WORKER_SHUTDOWN_TIMEOUT=1s", "BALLET_SERVER_SHUTDOWN_TIMEOUT=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var dbURL string
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "BALLET_DATABASE_URL="); ok {
			dbURL = v
		}
	}
	pool, err := pgxpool.New(ctx, dbURL)
	must(t, err)
	defer pool.Close()
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		must(t, pool.QueryRow(ctx, q, args...).Scan(&n))
		return n
	}
	dial := func(i int) *rpcclient.Client {
		rc, err := rpcclient.Dial(ctx, "ws://"+c.api(i)+"/rpc", rpcclient.JSON, token, &rpcclient.Options{Reconnect: true})
		must(t, err)
		t.Cleanup(func() { _ = rc.Close() })
		return rc
	}
	sender, watcher, canceller := dial(1), dial(2), dial(3)
	rest := client{t: t, base: "http://" + c.api(1) + "/api/v1", token: token}

	const sessions, messages = 24, 3
	seen := &clusterSeen{seen: map[string]map[int64]rpcclient.Output{}}
	var ids []string
	var watches []*rpcclient.Watch
	var wg sync.WaitGroup
	for range sessions {
		var sess struct{ ID string }
		if s := rest.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "cluster"}, &sess); s != 201 {
			t.Fatalf("create session: %d", s)
		}
		ids = append(ids, sess.ID)
		w, err := watcher.Watch(ctx, sess.ID, 0)
		must(t, err)
		watches = append(watches, w)
		wg.Go(func() {
			for o := range w.Outputs() {
				seen.add(o)
			}
		})
	}
	// The burst: every session's messages at once; every fourth session's
	// last message is a slow one, cancelled below.
	slow := map[string]bool{}
	var mu sync.Mutex
	errs := make(chan error, sessions)
	for i, id := range ids {
		go func() {
			for m := range messages {
				text := fmt.Sprintf("message %d of session %d", m, i)
				if i%4 == 0 && m == messages-1 {
					text = "think slowly about session " + strconv.Itoa(i)
				}
				res, err := sender.Send(ctx, id, text, "")
				if err != nil {
					errs <- err
					return
				}
				if strings.HasPrefix(text, "think") {
					mu.Lock()
					slow[res.Turn] = true
					mu.Unlock()
				}
			}
			errs <- nil
		}()
	}
	for range ids {
		must(t, <-errs)
	}
	const turns = sessions * messages
	if n := count(`SELECT count(*) FROM planner_turns`); n != turns {
		t.Fatalf("%d turns stored, want %d", n, turns)
	}
	// Mid-burst: some tool calls ran, many turns are still to go.
	storetest.WaitFor(t, "a third of the tool calls", func() bool {
		return count(`SELECT count(*) FROM planner_outputs WHERE type = 'tool_result'`) >= turns/3
	})
	open := count(`SELECT count(*) FROM planner_turns WHERE finished_at IS NULL`)
	c.kill(t, "worker-1")
	c.kill(t, "gateway-2")
	c.script(t, "restart", "gateway-2")
	// Cancel the slow turns through the third api once they run.
	for turn := range slow {
		var session string
		must(t, pool.QueryRow(ctx, `SELECT session_id FROM planner_turns WHERE id = $1`, turn).Scan(&session))
		storetest.WaitFor(t, "slow turn "+turn+" to start", func() bool {
			return count(`SELECT count(*) FROM planner_outputs WHERE turn_id = $1 AND type = 'started'`, turn) == 1
		})
		must(t, canceller.Cancel(ctx, session, turn))
	}
	if !storetest.Poll(90*time.Second, func() bool {
		return count(`SELECT count(*) FROM planner_turns WHERE finished_at IS NULL`) == 0
	}) {
		t.Fatalf("%d turns still open:\n%s", count(`SELECT count(*) FROM planner_turns WHERE finished_at IS NULL`), c.logs())
	}

	t.Logf("%d of %d turns open at the kills; %d turns ran more than once (resumed after a kill or a failed model call)",
		open, turns, count(`SELECT count(*) FROM planner_turns WHERE attempts > 1`))
	// Every accepted turn ended exactly once, as it should have.
	rows, err := pool.Query(ctx, `SELECT t.id, t.status, COALESCE(t.done_reason, ''),
		(SELECT count(*) FROM planner_outputs o WHERE o.turn_id = t.id AND o.type = 'done'),
		(SELECT count(*) FROM planner_outputs o WHERE o.turn_id = t.id AND o.type = 'tool_result'),
		(SELECT count(*) FROM planner_tool_calls c WHERE c.turn_id = t.id AND c.status = 'done'),
		t.attempts, COALESCE((SELECT string_agg(o.data::text, '; ') FROM planner_outputs o WHERE o.turn_id = t.id AND o.type = 'error'), '')
		FROM planner_turns t`)
	must(t, err)
	for rows.Next() {
		var id, status, reason string
		var dones, results, calls, attempts int
		var errText string
		must(t, rows.Scan(&id, &status, &reason, &dones, &results, &calls, &attempts, &errText))
		want := "done end_turn 1 1 1"
		if slow[id] {
			want = "cancelled cancelled 1 0 0"
		}
		if got := fmt.Sprintf("%s %s %d %d %d", status, reason, dones, results, calls); got != want {
			t.Errorf("turn %s (%d attempts, errors %q): status, reason, done outputs, tool results, tool calls %q, want %q",
				id, attempts, errText, got, want)
		}
	}
	must(t, rows.Err())
	if t.Failed() {
		t.Logf("the processes' logs:\n%s", c.logs())
	}
	if n := count(`SELECT count(*) FROM planner_tool_calls WHERE status <> 'done'`); n != 0 {
		t.Errorf("%d tool calls never finished", n)
	}
	if n := count(`SELECT count(*) FROM (SELECT session_id FROM planner_outputs GROUP BY session_id
		HAVING min(cursor) <> 1 OR max(cursor) <> count(*)) gaps`); n != 0 {
		t.Errorf("%d sessions' output cursors are not 1, 2, 3, …", n)
	}
	// The watchers on api-2 saw every stored output.
	type stored struct {
		session, turn, typ string
		cursor             int64
	}
	var all []stored
	rows, err = pool.Query(ctx, `SELECT session_id::text, turn_id::text, type, cursor FROM planner_outputs ORDER BY session_id, cursor`)
	must(t, err)
	for rows.Next() {
		var s stored
		must(t, rows.Scan(&s.session, &s.turn, &s.typ, &s.cursor))
		all = append(all, s)
	}
	must(t, rows.Err())
	var missing []stored
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		missing = missing[:0]
		for _, s := range all {
			if o, ok := seen.seen[s.session][s.cursor]; !ok || o.Type != s.typ || o.Turn != s.turn {
				missing = append(missing, s)
			}
		}
		return len(missing) == 0
	}) {
		t.Errorf("the watchers on api-2 missed %d of %d stored outputs, first %+v", len(missing), len(all), missing[0])
	}
	for _, w := range watches {
		w.Close()
	}
	wg.Wait()
}
