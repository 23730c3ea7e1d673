package store

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Every ballet process holds a pool of up to database.max_conns
// connections, and the pools of all the processes share the server's
// max_connections. Each process names its connections
// "<application>/<pid>" (ballet-api/4242), so operators see in
// pg_stat_activity which process holds what, and a starting process counts
// the ballet processes already connected to its database to check that the
// pools add up.

// applicationName is the application_name of this process's connections.
func applicationName(name string) string {
	if name == "" {
		name = "ballet"
	}
	return fmt.Sprintf("%s/%d", name, os.Getpid())
}

// PoolBudget compares the connections the ballet processes' pools may open
// with those the server accepts. It assumes every process has a pool of
// this one's size, and counts only the processes connected now.
type PoolBudget struct {
	// MaxConnections is the server's max_connections.
	MaxConnections int
	// Reserved are the connections kept for superusers and reserved roles
	// (superuser_reserved_connections + reserved_connections).
	Reserved int
	// Processes are the ballet processes connected, this one included.
	Processes int
	// MaxConns is this process's pool size (database.max_conns).
	MaxConns int
}

// Available is the connections ordinary roles may open.
func (b PoolBudget) Available() int { return b.MaxConnections - b.Reserved }

// Needed is the connections the processes' pools may open together.
func (b PoolBudget) Needed() int { return b.Processes * b.MaxConns }

// Over reports whether the pools may open more than the server accepts.
func (b PoolBudget) Over() bool { return b.Needed() > b.Available() }

// PoolBudget reads the server's connection limits and counts the ballet
// processes connected to this database, the deployment's (distinct
// application names of the form ballet[-service]/pid per client address).
func (db *DB) PoolBudget(ctx context.Context) (PoolBudget, error) {
	b := PoolBudget{MaxConns: int(db.pool.Config().MaxConns)}
	mine := db.pool.Config().ConnConfig.RuntimeParams["application_name"]
	err := db.pool.QueryRow(ctx, `
		SELECT current_setting('max_connections')::int,
		       current_setting('superuser_reserved_connections')::int
		         + COALESCE(NULLIF(current_setting('reserved_connections', true), '')::int, 0),
		       1 + (SELECT count(DISTINCT application_name || '@' || COALESCE(host(client_addr), 'local'))
		              FROM pg_stat_activity
		             WHERE datname = current_database()
		               AND application_name ~ '^ballet(-[a-z]+)?/[0-9]+$'
		               AND application_name <> $1)::int`, mine).Scan(&b.MaxConnections, &b.Reserved, &b.Processes)
	if err != nil {
		return PoolBudget{}, fmt.Errorf("store: pool budget: %w", err)
	}
	return b, nil
}

// warnPoolBudget logs one warning when the pools may outgrow the server.
// A failed check is logged at debug level: it must never stop a start.
func (db *DB) warnPoolBudget(ctx context.Context, log *slog.Logger) {
	b, err := db.PoolBudget(ctx)
	if err != nil {
		log.DebugContext(ctx, "database: pool size check skipped", slog.Any("error", err))
		return
	}
	if !b.Over() {
		return
	}
	fix := "raise the server's max_connections"
	if per := b.Available() / b.Processes; per >= 2 {
		fix = fmt.Sprintf("set database.max_conns to at most %d in every process, or %s", per, fix)
	}
	msg := fmt.Sprintf("database: the ballet processes' connection pools can open more connections than Postgres accepts: "+
		"%d processes × database.max_conns %d = %d > max_connections %d − %d reserved = %d; "+
		"once they are all in use, new connections fail (sorry, too many clients already); %s",
		b.Processes, b.MaxConns, b.Needed(), b.MaxConnections, b.Reserved, b.Available(), fix)
	log.WarnContext(ctx, strings.TrimSpace(msg),
		slog.Int("processes", b.Processes), slog.Int("max_conns", b.MaxConns), slog.Int("needed", b.Needed()),
		slog.Int("max_connections", b.MaxConnections), slog.Int("reserved_connections", b.Reserved),
		slog.Int("available", b.Available()))
}
