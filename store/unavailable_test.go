package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestUnavailableWhilePostgresIsDown: every error of a server that is gone
// (a held connection ended by the shutdown, a refused connect) is coded
// unavailable; after a restart the same pool answers again.
func TestUnavailableWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := storetest.StartPrivate(t)
	db := storetest.Open(t, pg.Migrated(t))
	if _, err := db.ListProjects(ctx, noOrg); err != nil {
		t.Fatalf("before stop: %v", err)
	}
	// A connection held across the shutdown sees it as it happens.
	held, err := db.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pg.Stop(t)
	_, heldErr := held.Exec(ctx, "SELECT 1")
	held.Release()
	_, poolErr := db.ListProjects(ctx, noOrg)
	for name, err := range map[string]error{"held connection": heldErr, "pool": poolErr} {
		if got := store.ErrorCode(err); got != store.CodeUnavailable {
			t.Errorf("%s: code %q of %v, want unavailable", name, got, err)
		}
	}
	pg.Start(t)
	storetest.WaitFor(t, "the pool to answer after the restart", func() bool {
		_, err := db.ListProjects(ctx, noOrg)
		return err == nil
	})
}

const noOrg = "00000000-0000-0000-0000-000000000000"

// TestIsUnavailableClassifies keeps answers of a live server, the caller's
// own cancel and plain bugs out of unavailable.
func TestIsUnavailableClassifies(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, cancelErr := db.Pool().Exec(cancelled, "SELECT 1")
	_, syntaxErr := db.Pool().Exec(context.Background(), "SELEC 1")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), false},
		{"coded error", store.Errorf(store.CodeNotFound, "x"), false},
		{"syntax error from the server", syntaxErr, false},
		{"caller cancelled", cancelErr, false},
		{"caller deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), false},
		{"admin shutdown", fmt.Errorf("op: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"conn closed", fmt.Errorf("op: %w", pgconn.ErrConnClosed), true},
		// What pgx returns when the server crashes mid-result.
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"connection reset", fmt.Errorf("op: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"broken pipe", fmt.Errorf("op: %w", syscall.EPIPE), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := store.IsUnavailable(tt.err); got != tt.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	refused := storetest.StartPrivate(t)
	url := refused.URL("postgres")
	refused.Stop(t)
	cfg := store.DefaultConfig()
	cfg.URL, cfg.ConnectTimeout = url, time.Second
	_, err := store.Open(context.Background(), cfg)
	if !store.IsUnavailable(err) {
		t.Fatalf("connect to a stopped server: %v is not unavailable", err)
	}
}
