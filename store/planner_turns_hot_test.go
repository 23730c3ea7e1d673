package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestClaimWritesNoIndexedColumn: the columns a claim writes (status,
// attempts, started_at) are in no index of planner_turns, neither as a key
// nor in a predicate, so that the claim's update can be HOT (migration
// 00104); a finish's finished_at is, and the open index keys on it.
func TestClaimWritesNoIndexedColumn(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rows, err := db.Pool().Query(context.Background(), `SELECT i.relname, pg_get_indexdef(x.indexrelid)
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = 'planner_turns'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		defs[name] = def
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name, def := range defs {
		for _, col := range []string{"status", "attempts", "started_at"} {
			if strings.Contains(def, col) {
				t.Errorf("%s names %s, which a claim writes: %s", name, col, def)
			}
		}
	}
	if def := defs["planner_turns_open_idx"]; !strings.Contains(def, "WHERE (finished_at IS NULL)") {
		t.Errorf("planner_turns_open_idx is %q, want the open turns by finished_at", def)
	}
}
