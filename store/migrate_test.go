package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestMigrateTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	n, err := db.Migrate(ctx)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if n != 0 {
		t.Fatalf("second migrate applied %d migrations, want 0", n)
	}
	st, err := db.MigrationStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d not applied", s.Version)
		}
	}
}

func TestConcurrentMigrateFromTwoHandles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An empty database that two migrators race for.
	u := storetest.EmptyURL(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			db, err := store.Open(ctx, store.Config{URL: u, MaxConns: 2, ConnectTimeout: 5e9})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			_, err = db.Migrate(ctx)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
}

// TestMigrateSchemaStatus: the schema check on an empty, a current, a
// partly migrated and a too-new database, and the message each one gives.
func TestMigrateSchemaStatus(t *testing.T) {
	t.Parallel()
	want := store.SchemaVersion()
	if want < 95 {
		t.Fatalf("SchemaVersion() = %d, want the highest embedded migration (95 or later)", want)
	}
	open := func(t *testing.T, url string) *store.DB {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return store.New(pool)
	}
	tests := []struct {
		name    string
		db      func(t *testing.T) *store.DB
		current int64
		pending bool
		code    store.Code
		message string
	}{
		{"empty", func(t *testing.T) *store.DB { return open(t, storetest.EmptyURL(t)) }, 0, true, store.CodeUnavailable,
			fmt.Sprintf(`schema: database at version 0, this binary needs %d: run "ballet migrate up"`, want)},
		{"current", func(t *testing.T) *store.DB { return storetest.New(t) }, want, false, "", ""},
		{"last migration missing", func(t *testing.T) *store.DB {
			db := storetest.New(t)
			execSQL(t, db, `DELETE FROM goose_db_version WHERE version_id = $1`, want)
			return db
		}, -1, true, store.CodeUnavailable, fmt.Sprintf(`this binary needs %d: run "ballet migrate up"`, want)},
		{"too new", func(t *testing.T) *store.DB {
			db := storetest.New(t)
			execSQL(t, db, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, want+1)
			return db
		}, want + 1, false, store.CodeConflict,
			fmt.Sprintf("schema: database at version %d is ahead of this binary, which knows up to %d", want+1, want)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := tt.db(t)
			s, err := db.SchemaStatus(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.Expected != want || (tt.current >= 0 && s.Current != tt.current) || s.Behind() != tt.pending {
				t.Errorf("SchemaStatus = %+v, want current %d of %d, pending %v", s, tt.current, want, tt.pending)
			}
			if tt.current < 0 && (s.Current >= want || !slices.Equal(s.Pending, []int64{want})) {
				t.Errorf("SchemaStatus = %+v, want below %d with only %d pending", s, want, want)
			}
			err = db.CheckSchema(context.Background())
			if tt.code == "" {
				if err != nil {
					t.Fatalf("CheckSchema on a current database: %v", err)
				}
				return
			}
			se := store.AsError(err)
			if se == nil || se.Code != tt.code || !strings.Contains(se.Message, tt.message) {
				t.Fatalf("CheckSchema = %v, want %s containing %q", err, tt.code, tt.message)
			}
		})
	}
}

func execSQL(t *testing.T, db *store.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
