// Package store is Ballet's durable state: Postgres through pgx, the embedded
// schema migrations, the domain records and the append-only event log.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config is the [database] section of the configuration.
type Config struct {
	// URL is the libpq connection string or URL of the Postgres database.
	URL string `toml:"url" secret:"true"`
	// MaxConns caps the connection pool.
	MaxConns int32 `toml:"max_conns"`
	// Migrate applies pending migrations when a process starts.
	Migrate bool `toml:"migrate"`
	// ConnectTimeout bounds the first connection at start-up.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
}

// DefaultConfig returns the built-in database defaults.
func DefaultConfig() Config {
	return Config{
		URL:            "postgres://postgres@127.0.0.1:5432/ballet?sslmode=disable",
		MaxConns:       20,
		Migrate:        true,
		ConnectTimeout: 5 * time.Second,
	}
}

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("database.url: must not be empty")
	}
	if _, err := pgxpool.ParseConfig(c.URL); err != nil {
		return fmt.Errorf("database.url: %w", err)
	}
	if c.MaxConns < 1 {
		return fmt.Errorf("database.max_conns: must be at least 1, got %d", c.MaxConns)
	}
	if c.ConnectTimeout <= 0 {
		return errors.New("database.connect_timeout: must be positive")
	}
	return nil
}

// DB is the handle every query goes through.
type DB struct {
	pool *pgxpool.Pool
}

// Open connects to Postgres and checks that it answers.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	pc.ConnConfig.ConnectTimeout = timeout
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: postgres at %s is unreachable: %w", describe(pc.ConnConfig), err)
	}
	return &DB{pool: pool}, nil
}

// New wraps an existing pool.
func New(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// Pool returns the underlying pgx pool.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Close releases every connection.
func (db *DB) Close() { db.pool.Close() }

// Ping checks that Postgres answers.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Tx runs fn in a transaction, committing when fn returns nil.
func (db *DB) Tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.pool, fn)
}

func describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}
