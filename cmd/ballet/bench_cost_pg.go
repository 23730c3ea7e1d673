package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/balletplanner/ballet/store"
)

// pgCounter counts what the driver sends to Postgres: statements (queries,
// the statements of a batch, COPY), round trips (a query, a batch, a COPY, a
// Prepare that reached the server; BEGIN and COMMIT are queries of their
// own) and the transactions that ended in a commit (an explicit COMMIT, or a
// statement or batch run outside a transaction). A connection's health-check
// ping is not seen.
type pgCounter struct {
	statements, roundTrips, commits, connects atomic.Int64
}

type pgCounts struct{ statements, roundTrips, commits, connects int64 }

func (c *pgCounter) counts() pgCounts {
	return pgCounts{c.statements.Load(), c.roundTrips.Load(), c.commits.Load(), c.connects.Load()}
}

type traceSQLKey struct{}

// TraceQueryStart counts a statement and its round trip.
func (c *pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	return context.WithValue(ctx, traceSQLKey{}, d.SQL)
}

// TraceQueryEnd counts a commit when the statement left no transaction open.
func (c *pgCounter) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(traceSQLKey{}).(string)
	if d.Err == nil && conn.PgConn().TxStatus() == 'I' && !strings.EqualFold(strings.TrimSpace(sql), "rollback") {
		c.commits.Add(1)
	}
}

// TraceBatchStart counts a batch as one round trip.
func (c *pgCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

// TraceBatchQuery counts each statement of a batch.
func (c *pgCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

// TraceBatchEnd counts the batch's implicit transaction.
func (c *pgCounter) TraceBatchEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	if d.Err == nil && conn.PgConn().TxStatus() == 'I' {
		c.commits.Add(1)
	}
}

// TraceCopyFromStart counts a COPY as one statement and one round trip.
func (c *pgCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	return ctx
}

// TraceCopyFromEnd does nothing.
func (c *pgCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// TracePrepareStart does nothing: a statement already prepared costs no trip.
func (c *pgCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

// TracePrepareEnd counts a Prepare that went to the server.
func (c *pgCounter) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		c.roundTrips.Add(1)
	}
}

// TraceConnectStart counts a new connection.
func (c *pgCounter) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	c.connects.Add(1)
	return ctx
}

// TraceConnectEnd does nothing.
func (c *pgCounter) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}

// benchDatabase is the database one mode of `bench turns` runs against: a
// fresh one created (and migrated) on the configured server, or the
// configured one itself. admin is a connection to the server's own
// database (never the bench's), for statistics and the final DROP.
type benchDatabase struct {
	name, url string
	fresh     bool
	admin     *pgx.Conn
	pgss      bool // pg_stat_statements is loaded and readable
}

// openBenchDatabase creates ballet_bench_<random> on the server of dc.URL
// and migrates it, unless reuse is set.
func openBenchDatabase(ctx context.Context, dc store.Config, reuse bool) (*benchDatabase, error) {
	u, err := url.Parse(dc.URL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("bench turns: database.url must be a URL to make a fresh database (or pass --reuse-database)")
	}
	admin, err := connectAdmin(ctx, *u)
	if err != nil {
		return nil, err
	}
	bd := &benchDatabase{admin: admin, url: dc.URL, name: strings.TrimPrefix(u.Path, "/")}
	if !reuse {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		bd.name = "ballet_bench_" + hex.EncodeToString(b)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+bd.name); err != nil {
			admin.Close(ctx)
			return nil, fmt.Errorf("bench turns: create database: %w", err)
		}
		bd.fresh = true
		u.Path = "/" + bd.name
		bd.url = u.String()
		mc := dc
		mc.URL = bd.url
		db, err := store.Open(ctx, mc)
		if err == nil {
			_, err = db.Migrate(ctx)
			db.Close()
		}
		if err != nil {
			bd.close(ctx, false)
			return nil, fmt.Errorf("bench turns: migrate %s: %w", bd.name, err)
		}
	}
	var n int64
	bd.pgss = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n) == nil
	return bd, nil
}

// connectAdmin connects to the database of u, or to "postgres" on the same
// server when that one does not exist.
func connectAdmin(ctx context.Context, u url.URL) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, u.String())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3D000" {
		u.Path = "/postgres"
		c, err = pgx.Connect(ctx, u.String())
	}
	if err != nil {
		return nil, fmt.Errorf("bench turns: connect: %w", err)
	}
	return c, nil
}

// close drops a fresh database (unless keep) and closes the admin connection.
func (bd *benchDatabase) close(ctx context.Context, keep bool) {
	if bd.fresh && !keep {
		_, _ = bd.admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+bd.name+" WITH (FORCE)")
	}
	_ = bd.admin.Close(context.WithoutCancel(ctx))
}

// pgSample is what Postgres says about the bench database at one moment.
type pgSample struct {
	backends     map[int]time.Duration // CPU of each backend on the database
	dispatchers  map[int]bool          // the backends of the dispatcher's own connections
	cpuReadable  bool
	server       time.Duration // the postmaster, its children and its reaped children
	commits      int64         // pg_stat_database.xact_commit
	statements   int64         // pg_stat_statements calls (when loaded)
	size, walLSN int64
}

// samplePG reads the database's backends' CPU from /proc, its commits, its
// size and the server's WAL position.
func (bd *benchDatabase) samplePG(ctx context.Context) (pgSample, error) {
	s := pgSample{backends: map[int]time.Duration{}, dispatchers: map[int]bool{}, cpuReadable: true}
	rows, err := bd.admin.Query(ctx, `SELECT pid, application_name = $2 FROM pg_stat_activity WHERE datname = $1`,
		bd.name, store.DispatchListenerName)
	if err != nil {
		return s, fmt.Errorf("bench turns: pg_stat_activity: %w", err)
	}
	type backend struct {
		pid        int32
		dispatcher bool
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (backend, error) {
		var b backend
		err := row.Scan(&b.pid, &b.dispatcher)
		return b, err
	})
	if err != nil {
		return s, fmt.Errorf("bench turns: pg_stat_activity: %w", err)
	}
	for _, b := range all {
		st, err := readProcStat(int(b.pid))
		if err != nil {
			s.cpuReadable = false
			continue
		}
		s.backends[int(b.pid)] = st.cpu
		s.dispatchers[int(b.pid)] = b.dispatcher
	}
	var self int32
	var lsn string
	if err := bd.admin.QueryRow(ctx, `SELECT pg_backend_pid(), coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0),
		pg_database_size($1), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint::text`, bd.name).
		Scan(&self, &s.commits, &s.size, &lsn); err != nil {
		return s, fmt.Errorf("bench turns: database statistics: %w", err)
	}
	s.walLSN, _ = strconv.ParseInt(lsn, 10, 64)
	if st, err := readProcStat(int(self)); err == nil {
		s.server = serverCPU(st.ppid)
	}
	if bd.pgss {
		_ = bd.admin.QueryRow(ctx, `SELECT coalesce(sum(s.calls), 0)::bigint FROM pg_stat_statements s
			JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`, bd.name).Scan(&s.statements)
	}
	return s, nil
}

// tlsBackends counts the database's backends whose connection is on TLS.
func (bd *benchDatabase) tlsBackends(ctx context.Context) (int, error) {
	var n int
	if err := bd.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.datname = $1 AND s.ssl`, bd.name).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench turns: pg_stat_ssl: %w", err)
	}
	return n, nil
}

// poolBackendPIDs are the process ids of the bench database's backends but
// the dispatcher's, which live outside the pool.
func (bd *benchDatabase) poolBackendPIDs(ctx context.Context) ([]int32, error) {
	rows, err := bd.admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name <> $2`,
		bd.name, store.DispatchListenerName)
	if err != nil {
		return nil, fmt.Errorf("bench turns: pg_stat_activity: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("bench turns: pg_stat_activity: %w", err)
	}
	return pids, nil
}

// commitsAfterExit waits (up to 15 s) until none of the backends pids is
// left, then reads the database's xact_commit. A backend flushes its
// statistics when it exits; an idle one may hold them for 10 s.
func (bd *benchDatabase) commitsAfterExit(ctx context.Context, pids []int32) (int64, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		var left, commits int64
		if err := bd.admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($2)),
			coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0)`, bd.name, pids).Scan(&left, &commits); err != nil {
			return 0, fmt.Errorf("bench turns: pg_stat_database: %w", err)
		}
		if left == 0 || time.Now().After(deadline) {
			return commits, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
