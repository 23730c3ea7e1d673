// Package storetest gives each test its own migrated Postgres database,
// cloned from a template that is migrated once per schema version.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
)

// AdminURL is the server the test databases are made on; it names a database
// that always exists (postgres). BALLET_TEST_DATABASE_URL overrides it.
func AdminURL() string {
	if u := os.Getenv("BALLET_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// URL creates a fresh, migrated database for the test and returns its URL.
// The database is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(context.Background()) })
	if templateErr != nil {
		t.Fatalf("storetest: template: %v", templateErr)
	}
	return create(t, "TEMPLATE "+templateName)
}

// EmptyURL creates an empty database (no migrations) for the test.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return create(t, "")
}

func create(t testing.TB, clause string) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("storetest: connect to %s: %v", AdminURL(), err)
	}
	defer admin.Close(ctx)
	name := "ballet_t_" + randomHex(8)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s %s", name, clause)); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Logf("storetest: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Logf("storetest: drop %s: %v", name, err)
		}
	})
	return withDatabase(AdminURL(), name)
}

// New returns a store on a fresh, migrated database of the test's own.
func New(t testing.TB) *store.DB {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("storetest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool)
}

func ensureTemplate(ctx context.Context) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "ballet_tpl_" + sum[:12]
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", AdminURL(), err)
	}
	defer admin.Close(ctx)
	// One process builds the template; the others wait on the lock.
	lockKey := int64(binary.BigEndian.Uint64(mustHex(sum)[:8]))
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer admin.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", fmt.Errorf("drop stale template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	db, err := store.Open(ctx, store.Config{URL: withDatabase(AdminURL(), building), MaxConns: 2, ConnectTimeout: 10 * time.Second})
	if err != nil {
		return "", err
	}
	_, err = db.Migrate(ctx)
	db.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", fmt.Errorf("rename template: %w", err)
	}
	return name, nil
}

func migrationsHash() (string, error) {
	fsys := store.Migrations()
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// withDatabase swaps the database name of a postgres URL.
func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return raw + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
