package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

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
	sqlDB := stdlib.OpenDBFromPool(db.pool)
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
