package storetest

import (
	"context"
	"fmt"
	"github.com/balletplanner/ballet/internal/porttest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
)

// Private is a Postgres server of one test's own, made with the local
// binaries (initdb, pg_ctl) on a spare loopback port with its data under a
// temporary directory, for tests that stop and start the server. The shared
// server is never touched. BALLET_TEST_PG_BIN names the binaries' directory
// when it is not the newest /usr/lib/postgresql/*/bin.
type Private struct {
	dir  string // data directory, also the socket directory
	bin  string
	port int
	as   string // the user the server runs as; "" for the current one
}

// StartPrivate initializes and starts a private server (trust auth, user
// postgres) and stops and removes it when t ends. As root, the server runs
// as the postgres user, which owns the data directory.
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	bin, err := pgBin()
	if err != nil {
		t.Fatalf("storetest: private postgres: %v", err)
	}
	dir, err := os.MkdirTemp("", "ballet-pg-")
	if err != nil {
		t.Fatalf("storetest: private postgres: %v", err)
	}
	p := &Private{dir: dir, bin: bin}
	t.Cleanup(func() {
		_ = p.pgctl("-m", "immediate", "-w", "stop")
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("storetest: private postgres: running as root needs a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("storetest: private postgres: %v", err)
		}
		p.as = "postgres"
	}
	if out, err := p.command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("storetest: private postgres: initdb: %v\n%s", err, out)
	}
	p.Start(t)
	return p
}

// URL is the server's URL for the named database.
func (p *Private) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, database)
}

// Migrated creates the database "ballet" on the server, applies the
// migrations and returns its URL.
func (p *Private) Migrated(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatalf("storetest: private postgres: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE ballet"); err != nil {
		t.Fatalf("storetest: private postgres: create database: %v", err)
	}
	cfg := store.DefaultConfig()
	cfg.URL = p.URL("ballet")
	db, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("storetest: private postgres: %v", err)
	}
	defer db.Close()
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatalf("storetest: private postgres: migrate: %v", err)
	}
	return cfg.URL
}

// Start starts the server (again), on the port it had, or on a spare one
// the first time; it returns once the server accepts connections.
func (p *Private) Start(t testing.TB) {
	t.Helper()
	var err error
	for range 3 { // a spare port may be taken between the probe and the start
		if p.port == 0 || err != nil {
			if p.port, err = sparePort(); err != nil {
				t.Fatalf("storetest: private postgres: %v", err)
			}
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50", p.port, p.dir)
		if err = p.pgctl("-l", filepath.Join(p.dir, "log"), "-o", opts, "-w", "-t", "120", "start"); err == nil {
			return
		}
	}
	log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	t.Fatalf("storetest: private postgres: start: %v\n%s", err, log)
}

// Stop shuts the server down (fast mode: sessions are ended with 57P01) and
// returns once it is gone.
func (p *Private) Stop(t testing.TB) {
	t.Helper()
	if err := p.pgctl("-m", "fast", "-w", "-t", "120", "stop"); err != nil {
		t.Fatalf("storetest: private postgres: stop: %v", err)
	}
}

// Crash stops the server as a crash does (immediate mode: no checkpoint;
// the next Start recovers from the WAL) and returns once it is gone.
func (p *Private) Crash(t testing.TB) {
	t.Helper()
	if err := p.pgctl("-m", "immediate", "-w", "-t", "120", "stop"); err != nil {
		t.Fatalf("storetest: private postgres: crash: %v", err)
	}
}

func (p *Private) pgctl(args ...string) error {
	args = append([]string{"-D", filepath.Join(p.dir, "data")}, args...)
	if out, err := p.command(filepath.Join(p.bin, "pg_ctl"), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", args[len(args)-1], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// command runs name as the server's user.
func (p *Private) command(name string, args ...string) *exec.Cmd {
	if p.as == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("runuser", append([]string{"-u", p.as, "--", name}, args...)...)
}

func pgBin() (string, error) {
	if d := os.Getenv("BALLET_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(initdb), nil
	}
	return "", fmt.Errorf("no initdb under /usr/lib/postgresql/*/bin or on PATH; set BALLET_TEST_PG_BIN")
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func sparePort() (int, error) { return porttest.Spare() }

// privateDialTimeout bounds one connection attempt to a private server in
// tests that expect it to be down.
const privateDialTimeout = 2 * time.Second

// Open connects a pool to the database at url with a short connect timeout,
// for tests that stop the server under it, and closes it when t ends.
func Open(t testing.TB, url string) *store.DB {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.URL = url
	cfg.ConnectTimeout = privateDialTimeout
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("storetest: open: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}
