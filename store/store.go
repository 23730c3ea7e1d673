// Package store is Ballet's durable state: Postgres through pgx, the embedded
// schema migrations, the domain records and the append-only event log.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
	// StatementTimeout bounds every statement on the pool's connections;
	// 0 leaves the server's setting. Searches run under SearchTimeout instead.
	StatementTimeout time.Duration `toml:"statement_timeout"`
	// IdleInTransactionTimeout ends a session whose transaction waits that
	// long for its client (a paused or stuck process), releasing its locks:
	// a stale worker never holds a session's row longer. 0 leaves the
	// server's setting.
	IdleInTransactionTimeout time.Duration `toml:"idle_in_transaction_timeout"`
	// ApplicationName names the process's connections in pg_stat_activity,
	// suffixed with "/" and the process id (e.g. ballet-api/4242); "" is
	// "ballet". An application_name in URL wins.
	ApplicationName string `toml:"-"`
	// Logger receives Open's warnings; nil is slog.Default().
	Logger *slog.Logger `toml:"-"`
	// Tracer, when set, traces every query of the pool's connections (pgx
	// also calls its Batch, CopyFrom, Prepare and Connect methods where it
	// has them); benchmarks count statements and round trips with it.
	Tracer pgx.QueryTracer `toml:"-"`
	// DirectDispatch dispatches a turn in the statement that makes it ready
	// (scheduler.mode = "fifo"); see DB.SetDirectDispatch.
	DirectDispatch bool `toml:"-"`
	// SearchTimeout is the statement timeout of one search.
	SearchTimeout time.Duration `toml:"search_timeout"`
	// SearchMaxConns caps the connections that searches hold at once in
	// this process; the rest of the pool stays free for everything else.
	SearchMaxConns int `toml:"search_max_conns"`
	// SearchMaxConnsPerOrg caps those of one organization.
	SearchMaxConnsPerOrg int `toml:"search_max_conns_per_org"`
	// SearchQueueTimeout is how long a search waits for one of those
	// connections before it is refused.
	SearchQueueTimeout time.Duration `toml:"search_queue_timeout"`
	// SearchMaxTerms bounds the words and operators of a search query.
	SearchMaxTerms int `toml:"search_max_terms"`
	// SearchMaxChars bounds the length of a search query, in characters.
	SearchMaxChars int `toml:"search_max_chars"`
}

// DefaultConfig returns the built-in database defaults.
func DefaultConfig() Config {
	return Config{
		URL:            "postgres://postgres@127.0.0.1:5432/ballet?sslmode=disable",
		MaxConns:       20,
		Migrate:        true,
		ConnectTimeout: 5 * time.Second,

		StatementTimeout:         30 * time.Second,
		IdleInTransactionTimeout: 3 * time.Second,

		SearchTimeout:        defaultSearch.timeout,
		SearchMaxConns:       defaultSearch.maxConns,
		SearchMaxConnsPerOrg: defaultSearch.perOrg,
		SearchQueueTimeout:   defaultSearch.wait,
		SearchMaxTerms:       defaultSearch.maxTerms,
		SearchMaxChars:       defaultSearch.maxChars,
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
	if c.StatementTimeout < 0 {
		return errors.New("database.statement_timeout: must not be negative (0 is none)")
	}
	if c.IdleInTransactionTimeout < 0 {
		return errors.New("database.idle_in_transaction_timeout: must not be negative (0 is the server's)")
	}
	return c.validateSearch()
}

// DB is the handle every query goes through.
type DB struct {
	pool   *pgxpool.Pool
	search searchLimits
	// numbering shares the numberings readers ask for (events_number.go).
	numbering numberingGate
	// direct dispatches a turn as it becomes ready (planner_dispatch.go).
	direct bool
}

// Open connects to Postgres and checks that it answers. It warns (through
// cfg.Logger) when the pools of the ballet processes on the server can
// together open more connections than the server accepts; see PoolBudget.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	plainOnLoopback(pc, cfg.URL)
	pc.MaxConns = cfg.MaxConns
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	pc.ConnConfig.ConnectTimeout = timeout
	params := pc.ConnConfig.RuntimeParams
	if params["application_name"] == "" {
		params["application_name"] = applicationName(cfg.ApplicationName)
	}
	if cfg.StatementTimeout > 0 {
		params["statement_timeout"] = strconv.FormatInt(max(1, cfg.StatementTimeout.Milliseconds()), 10)
	}
	if cfg.IdleInTransactionTimeout > 0 {
		params["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(1, cfg.IdleInTransactionTimeout.Milliseconds()), 10)
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
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
	db := &DB{pool: pool, search: searchLimitsOf(cfg), direct: cfg.DirectDispatch}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	db.warnPoolBudget(pctx, log)
	return db, nil
}

// New wraps an existing pool; searches get the default limits.
func New(pool *pgxpool.Pool) *DB {
	return &DB{pool: pool, search: searchLimitsOf(Config{MaxConns: pool.Config().MaxConns})}
}

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
