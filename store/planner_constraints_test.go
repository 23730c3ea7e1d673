package store_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
)

// constraintChecks counts the constraint triggers Postgres runs, by name,
// from the plans auto_explain sends the connection as notices (every
// statement, nested ones too, with their triggers' calls).
type constraintChecks struct {
	mu     sync.Mutex
	counts map[string]int
}

var triggerLine = regexp.MustCompile(`Trigger for constraint (\S+)(?: on \S+)?: (?:time=\S+ )?calls=(\d+)`)

func (c *constraintChecks) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range triggerLine.FindAllStringSubmatch(n.Message, -1) {
		calls, _ := strconv.Atoi(m[2])
		c.counts[m[1]] += calls
	}
}

func (c *constraintChecks) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := c.counts
	c.counts = map[string]int{}
	return counts
}

func total(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// TestTurnConstraintChecks counts, step by step, the constraint triggers
// (foreign-key checks) a turn's statements run, with the dropped
// constraints restored and as migrated: the migrated schema runs none of
// the dropped ones and fewer in all. The table is logged (go test -v).
func TestTurnConstraintChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	perStep := map[string]map[string]map[string]int{} // schema, step, constraint
	var order []string
	for _, schema := range schemas {
		f := newTrackerFixture(t)
		if schema.restore {
			restoreDroppedConstraints(t, f.db)
		}
		checks := &constraintChecks{counts: map[string]int{}}
		pc := f.db.Pool().Config().Copy()
		pc.MaxConns = 1
		pc.ConnConfig.OnNotice = checks.notice
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `LOAD 'auto_explain';
				SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
				SET auto_explain.log_triggers = on; SET auto_explain.log_nested_statements = on;
				SET auto_explain.log_timing = off; SET auto_explain.log_level = notice`)
			return err
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		db := store.New(pool)
		s, err := db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		steps := map[string]map[string]int{}
		for n := range 2 {
			order = order[:0]
			for _, st := range turnSteps(db, f.engineer, s.ID, n) {
				checks.take()
				if err := st.run(ctx); err != nil {
					t.Fatalf("%s, turn %d, %s: %v", schema.name, n, st.name, err)
				}
				if n == 1 { // the second turn: a session with history
					if steps[st.name] == nil {
						steps[st.name] = map[string]int{}
						order = append(order, st.name)
					}
					for k, v := range checks.take() {
						steps[st.name][k] += v
					}
				}
			}
		}
		pool.Close()
		perStep[schema.name] = steps
	}
	before, after := perStep[schemas[0].name], perStep[schemas[1].name]
	var b strings.Builder
	fmt.Fprintf(&b, "| step | constraint checks before | after | dropped ones before |\n|---|---|---|---|\n")
	sumBefore, sumAfter := 0, 0
	for _, step := range order {
		var gone []string
		for k, v := range before[step] {
			if after[step][k] == 0 {
				gone = append(gone, fmt.Sprintf("%s ×%d", k, v))
			}
		}
		sort.Strings(gone)
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", step, total(before[step]), total(after[step]), strings.Join(gone, ", "))
		sumBefore += total(before[step])
		sumAfter += total(after[step])
		for k, v := range after[step] {
			if v > before[step][k] {
				t.Errorf("%s: %s runs %d times as migrated, %d before", step, k, v, before[step][k])
			}
		}
	}
	fmt.Fprintf(&b, "| whole turn | %d | %d | |\n", sumBefore, sumAfter)
	t.Logf("constraint triggers per step (a turn with one tool call):\n%s", b.String())
	for step, counts := range after {
		for k := range counts {
			if strings.HasPrefix(k, "planner_outputs_") || strings.HasPrefix(k, "planner_messages_") ||
				strings.HasPrefix(k, "event_numbers_") {
				t.Errorf("%s still runs %s", step, k)
			}
		}
	}
	if sumAfter >= sumBefore {
		t.Errorf("a turn runs %d constraint checks as migrated, %d before", sumAfter, sumBefore)
	}
}

// plannerRows counts what is stored of a session: outputs, messages, tool
// calls, turns, and messages whose turn is gone.
func plannerRows(t *testing.T, db *store.DB, session string) string {
	t.Helper()
	var outs, msgs, calls, turns, orphans int
	if err := db.Pool().QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM planner_outputs WHERE session_id = $1),
		(SELECT count(*) FROM planner_messages WHERE session_id = $1),
		(SELECT count(*) FROM planner_tool_calls WHERE session_id = $1),
		(SELECT count(*) FROM planner_turns WHERE session_id = $1),
		(SELECT count(*) FROM planner_messages WHERE session_id = $1 AND turn_id IS NULL)`,
		session).Scan(&outs, &msgs, &calls, &turns, &orphans); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("outputs %d, messages %d (%d without turn), tool calls %d, turns %d", outs, msgs, orphans, calls, turns)
}

// eventNumbers counts the event number rows of an organization and of a project.
func eventNumbers(t *testing.T, db *store.DB, organization, project string) (int, int) {
	t.Helper()
	var byOrg, byProject int
	if err := db.Pool().QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM event_numbers WHERE organization_id = $1),
		(SELECT count(*) FROM event_numbers WHERE project_id = $2)`, organization, project).Scan(&byOrg, &byProject); err != nil {
		t.Fatal(err)
	}
	return byOrg, byProject
}

// TestDeletesStillRemoveWhatTheForeignKeysDid deletes a turn, a session, a
// project and an organization, with the dropped foreign keys restored and as
// migrated, and finds the same rows left either way: a session's outputs
// and messages go with it, a turn's outputs with it (its messages stay,
// without their turn), a project's or an organization's event numbers with
// it.
func TestDeletesStillRemoveWhatTheForeignKeysDid(t *testing.T) {
	t.Parallel()
	for _, schema := range schemas {
		t.Run(schema.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTrackerFixture(t)
			if schema.restore {
				restoreDroppedConstraints(t, f.db)
			}
			session := func(caller store.Caller, project string) string {
				s, err := f.db.CreateSession(ctx, caller, project, "plan")
				if err != nil {
					t.Fatal(err)
				}
				for n := range 2 {
					for _, st := range turnSteps(f.db, caller, s.ID, n) {
						if err := st.run(ctx); err != nil {
							t.Fatalf("%s: %v", st.name, err)
						}
					}
				}
				return s.ID
			}
			gone, kept, glx := session(f.engineer, "WEB"), session(f.engineer, "WEB"), session(f.otherEngineer, "GLX")
			const full = "outputs 16, messages 8 (0 without turn), tool calls 2, turns 2"
			const none = "outputs 0, messages 0 (0 without turn), tool calls 0, turns 0"
			exec := func(retention bool, sql string, args ...any) {
				t.Helper()
				// Events are append-only; the retention switch lets a
				// project's or an organization's go with it.
				err := f.db.Tx(ctx, func(tx pgx.Tx) error {
					if retention {
						if _, err := tx.Exec(ctx, `SET LOCAL ballet.retention = 'on'`); err != nil {
							return err
						}
					}
					_, err := tx.Exec(ctx, sql, args...)
					return err
				})
				if err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			for _, s := range []string{gone, kept, glx} {
				if got := plannerRows(t, f.db, s); got != full {
					t.Fatalf("before the deletes: %s, want %s", got, full)
				}
			}

			exec(false, `DELETE FROM planner_sessions WHERE id = $1`, gone)
			if got := plannerRows(t, f.db, gone); got != none {
				t.Errorf("deleted session: %s, want %s", got, none)
			}
			if got := plannerRows(t, f.db, kept); got != full {
				t.Errorf("the project's other session: %s, want %s", got, full)
			}

			exec(false, `DELETE FROM planner_turns WHERE id = (SELECT id FROM planner_turns
				WHERE session_id = $1 ORDER BY position LIMIT 1)`, kept)
			if got, want := plannerRows(t, f.db, kept), "outputs 8, messages 8 (4 without turn), tool calls 1, turns 1"; got != want {
				t.Errorf("after a deleted turn: %s, want %s", got, want)
			}

			numberAll(t, f.db)
			if org, project := eventNumbers(t, f.db, f.org.ID, f.project.ID); org == 0 || project == 0 {
				t.Fatalf("event numbers before the project's delete: organization %d, project %d", org, project)
			}
			exec(true, `DELETE FROM projects WHERE id = $1`, f.project.ID)
			if got := plannerRows(t, f.db, kept); got != none {
				t.Errorf("session of a deleted project: %s, want %s", got, none)
			}
			if _, project := eventNumbers(t, f.db, f.org.ID, f.project.ID); project != 0 {
				t.Errorf("deleted project: %d event numbers left", project)
			}
			if got := plannerRows(t, f.db, glx); got != full {
				t.Errorf("the other organization's session: %s, want %s", got, full)
			}
			otherOrg, otherProject := eventNumbers(t, f.db, f.otherOrg.ID, f.otherProject.ID)
			if otherOrg == 0 || otherProject == 0 {
				t.Errorf("the other organization's event numbers: organization %d, project %d", otherOrg, otherProject)
			}

			exec(true, `DELETE FROM organizations WHERE id = $1`, f.org.ID)
			if org, _ := eventNumbers(t, f.db, f.org.ID, f.project.ID); org != 0 {
				t.Errorf("deleted organization: %d event numbers left", org)
			}
			if o, p := eventNumbers(t, f.db, f.otherOrg.ID, f.otherProject.ID); o != otherOrg || p != otherProject {
				t.Errorf("the other organization's event numbers: %d, %d; want %d, %d", o, p, otherOrg, otherProject)
			}
		})
	}
}
