package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the embedded SQL migrations.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	return sub
}

// MigrationStatus is one migration and whether it has been applied.
type MigrationStatus struct {
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
}

// provider builds a goose provider holding a Postgres session lock, so that
// concurrent migrators wait for each other instead of racing.
func (db *DB) provider() (*goose.Provider, *sql.DB, error) {
	// Migrations may run longer than database.statement_timeout allows,
	// and goose works between the statements of its transactions.
	cc := db.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["statement_timeout"] = "0"
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	sqlDB := stdlib.OpenDB(*cc)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("store: migrate: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, Migrations(), goose.WithSessionLocker(locker))
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("store: migrate: %w", err)
	}
	return p, sqlDB, nil
}

// Migrate applies every pending migration and returns how many ran.
func (db *DB) Migrate(ctx context.Context) (int, error) {
	p, sqlDB, err := db.provider()
	if err != nil {
		return 0, err
	}
	defer sqlDB.Close()
	res, err := p.Up(ctx)
	if err != nil {
		var pe *goose.PartialError
		if errors.As(err, &pe) {
			return len(pe.Applied), fmt.Errorf("store: migrate: %w", pe.Err)
		}
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	return len(res), nil
}

// MigrationStatuses lists every known migration and whether it is applied.
func (db *DB) MigrationStatuses(ctx context.Context) ([]MigrationStatus, error) {
	p, sqlDB, err := db.provider()
	if err != nil {
		return nil, err
	}
	defer sqlDB.Close()
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: migration status: %w", err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationStatus{
			Version: s.Source.Version,
			Name:    s.Source.Path,
			Applied: s.State == goose.StateApplied,
		})
	}
	return out, nil
}

// Schema is the database's schema against the one this binary was built
// with.
type Schema struct {
	// Current is the highest migration version recorded in the database; 0
	// for a database that was never migrated.
	Current int64 `json:"current"`
	// Expected is the highest embedded migration: the version this binary
	// needs.
	Expected int64 `json:"expected"`
	// Pending are the embedded migrations the database has not applied,
	// ascending.
	Pending []int64 `json:"pending,omitempty"`
}

// Behind reports whether migrations of this binary are still to be applied.
func (s Schema) Behind() bool { return len(s.Pending) > 0 }

// Ahead reports whether the database carries migrations newer than this
// binary knows, as while a newer release rolls out.
func (s Schema) Ahead() bool { return s.Current > s.Expected }

// Err is nil when the database is exactly at this binary's version. Else it
// is an unavailable error (migrations pending) or a conflict (the database
// is ahead) whose message names both versions and what to run, e.g.
// `schema: database at version 0, this binary needs 95: run "ballet migrate up"`.
func (s Schema) Err() error {
	details := map[string]any{"current": s.Current, "expected": s.Expected}
	switch {
	case s.Behind() && s.Current < s.Expected:
		e := Errorf(CodeUnavailable, "schema: database at version %d, this binary needs %d: run \"ballet migrate up\"",
			s.Current, s.Expected)
		e.Details = details
		return e
	case s.Behind():
		e := Errorf(CodeUnavailable, "schema: database at version %d lacks migration(s) %s of this binary: run \"ballet migrate up\"",
			s.Current, joinVersions(s.Pending))
		e.Details = details
		return e
	case s.Ahead():
		e := Errorf(CodeConflict, "schema: database at version %d is ahead of this binary, which knows up to %d: run the release that applied %d or newer",
			s.Current, s.Expected, s.Current)
		e.Details = details
		return e
	}
	return nil
}

func joinVersions(vs []int64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

var embedded = sync.OnceValue(func() []int64 {
	entries, err := fs.ReadDir(Migrations(), ".")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	var vs []int64
	for _, e := range entries {
		if v, err := goose.NumericComponent(e.Name()); err == nil && strings.HasSuffix(e.Name(), ".sql") {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
})

// SchemaVersion is the highest version among the embedded migrations: the
// schema this binary needs.
func SchemaVersion() int64 {
	vs := embedded()
	if len(vs) == 0 {
		return 0
	}
	return vs[len(vs)-1]
}

// SchemaStatus reads which migrations the database has applied, in one
// query that neither locks nor writes (a database that was never migrated
// has no version table and is at version 0), cheap enough for a readiness
// probe.
func (db *DB) SchemaStatus(ctx context.Context) (Schema, error) {
	s := Schema{Expected: SchemaVersion()}
	rows, err := db.pool.Query(ctx, `SELECT version_id FROM goose_db_version WHERE is_applied AND version_id > 0`)
	if err != nil {
		return s, schemaStatusErr(err, &s)
	}
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return s, fmt.Errorf("store: schema status: %w", err)
		}
		applied[v] = true
		s.Current = max(s.Current, v)
	}
	if err := rows.Err(); err != nil {
		return s, schemaStatusErr(err, &s)
	}
	for _, v := range embedded() {
		if !applied[v] {
			s.Pending = append(s.Pending, v)
		}
	}
	return s, nil
}

// SchemaMissing reports whether err is Postgres saying a table or column
// does not exist: the database has not been migrated to this binary's
// schema yet (its /readyz says so), which background loops wait out
// quietly instead of warning at every pass.
func SchemaMissing(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703") // undefined_table, undefined_column
}

// schemaStatusErr makes a missing version table a database at version 0
// with every migration pending.
func schemaStatusErr(err error, s *Schema) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		s.Pending = slices.Clone(embedded())
		return nil
	}
	return fmt.Errorf("store: schema status: %w", err)
}

// CheckSchema is SchemaStatus's Err: nil when the database is at this
// binary's version.
func (db *DB) CheckSchema(ctx context.Context) error {
	s, err := db.SchemaStatus(ctx)
	if err != nil {
		return err
	}
	return s.Err()
}
