package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// pathological are queries that used to run for seconds on a large
// organization, or fail inside Postgres.
var pathological = map[string]string{
	"50 dashes":        strings.Repeat("-", 50),
	"spaced dashes":    strings.Repeat("- ", 40),
	"lorem ipsum x40":  strings.TrimSpace(strings.Repeat("lorem ipsum ", 40)),
	"-x0 … -x99":       negations(100),
	"33 dashes a word": strings.Repeat("-", 33) + "login",
}

func negations(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("-x%d", i)
	}
	return strings.Join(parts, " ")
}

func TestSearchQueryBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := searchFix(t)
	if _, err := f.db.CreateKnowledge(ctx, f.admin, "acme", store.NewKnowledge{Kind: "note", Title: "Login notes", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	for name, q := range pathological {
		t.Run("refuse "+name, func(t *testing.T) {
			_, err := f.db.Search(ctx, f.admin, store.SearchQuery{Q: q})
			wantCode(t, err, store.CodeInvalid, "q: at most 16 terms")
			_, err = f.db.SearchKnowledge(ctx, f.admin, "acme", store.KnowledgeSearch{Q: q})
			wantCode(t, err, store.CodeInvalid, "q: at most 16 terms")
		})
	}
	t.Run("refuse too long", func(t *testing.T) {
		_, err := f.db.Search(ctx, f.admin, store.SearchQuery{Q: strings.Repeat("x", 501)})
		wantCode(t, err, store.CodeInvalid, "q: at most 500 characters, got 501")
	})
	for _, tc := range []struct{ name, q, first string }{
		{"16 terms", "login " + strings.TrimSpace(strings.Repeat("page ", 15)), "WEB-1"},
		{"a key is two terms", "WEB-12", "WEB-12"},
		{"hyphenated words", "e-mail password-reset", ""},
		{"16 terms with dashes", strings.Repeat("-", 14) + "x login", ""},
	} {
		t.Run("accept "+tc.name, func(t *testing.T) {
			hits, err := f.db.Search(ctx, f.admin, store.SearchQuery{Q: tc.q, Kind: "item"})
			if err != nil {
				t.Fatalf("search %q: %v", tc.q, err)
			}
			if tc.first != "" && (len(hits) == 0 || hits[0].Key != tc.first) {
				t.Fatalf("search %q: hits %v, want %s first", tc.q, keysOf(hits), tc.first)
			}
		})
	}
	if n := f.count(t, `SELECT count(*) FROM items`); n != 8 {
		t.Fatalf("items = %d after searching", n)
	}
}

// guardFix is a store opened with its own search limits on a fresh
// database, with organizations acme (project WEB) and globex (GLX).
type guardFix struct {
	db           *store.DB
	acme, globex store.Caller
	web, glx     store.Project
}

func newGuardFix(t *testing.T, cfg store.Config) *guardFix {
	t.Helper()
	ctx := context.Background()
	cfg.URL, cfg.ConnectTimeout = storetest.URL(t), 10*time.Second
	db, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	f := &guardFix{db: db}
	sys := store.SystemActor()
	for _, o := range []struct {
		key, project string
		p            *store.Project
		c            *store.Caller
	}{{"acme", "WEB", &f.web, &f.acme}, {"globex", "GLX", &f.glx, &f.globex}} {
		org, err := db.CreateOrganization(ctx, o.key, o.key, sys)
		if err != nil {
			t.Fatal(err)
		}
		if *o.p, err = db.CreateProject(ctx, org.ID, o.project, o.project, sys); err != nil {
			t.Fatal(err)
		}
		*o.c = store.HumanCaller(&store.Principal{Subject: o.key + "-admin", Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: o.key + "-admin", Role: store.RoleOrganizationAdmin,
				Scope: store.Scope{Kind: store.ScopeOrganization, OrganizationID: org.ID}}}})
		insertItem(t, db, *o.p, 1, "Login page", "Sign in")
		if _, err := db.CreateSkill(ctx, *o.c, store.NewSkill{Name: "login-review", Scope: "organization:" + o.key,
			Description: "Review login changes", Draft: "Check the login flow."}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateKnowledge(ctx, *o.c, o.key, store.NewKnowledge{Kind: "note", Title: "Login notes", Body: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// lockTable holds an ACCESS EXCLUSIVE lock on table, on a connection of
// its own, until the returned function (also a cleanup) ends the
// transaction. Every statement that reads the table waits for it.
func lockTable(t *testing.T, db *store.DB, table string) (conn *pgx.Conn, unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.Pool().Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
	}
	if err != nil {
		conn.Close(ctx)
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(func() { unlock(); conn.Close(ctx) })
	return conn, unlock
}

// lockWaiters counts the backends waiting for a lock. It runs on the
// lock's own connection, inside its transaction, so it drops the
// transaction's snapshot of the activity statistics first.
func lockWaiters(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_clear_snapshot(), pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSearchStatementTimeout(t *testing.T) {
	t.Parallel()
	f := newGuardFix(t, store.Config{MaxConns: 2, SearchMaxConns: 1, SearchTimeout: 200 * time.Millisecond})
	for _, tc := range []struct {
		table  string
		search func(context.Context) error
	}{
		{"items", func(ctx context.Context) error {
			_, err := f.db.Search(ctx, f.acme, store.SearchQuery{Q: "login", Kind: "item"})
			return err
		}},
		{"skills", func(ctx context.Context) error {
			_, err := f.db.Search(ctx, f.acme, store.SearchQuery{Q: "login", Kind: "skill", Project: "WEB"})
			return err
		}},
		{"knowledge_entries", func(ctx context.Context) error {
			_, err := f.db.SearchKnowledge(ctx, f.acme, "acme", store.KnowledgeSearch{Q: "login"})
			return err
		}},
	} {
		t.Run(tc.table, func(t *testing.T) {
			_, unlock := lockTable(t, f.db, tc.table)
			// More searches than the pool has connections: each one that
			// runs out of time must give its connection back.
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), storetest.WaitTimeout)
				err := tc.search(ctx)
				cancel()
				wantCode(t, err, store.CodeInvalid, "q: the search took longer than 200ms; narrow the query")
			}
			storetest.WaitFor(t, "the pool to have no acquired connection", func() bool {
				return f.db.Pool().Stat().AcquiredConns() == 0
			})
			unlock()
			if err := tc.search(context.Background()); err != nil {
				t.Fatalf("search after the lock: %v", err)
			}
		})
	}
}

// TestSearchIsolation runs 24 searches of acme that cannot finish (their
// table is locked) and checks that globex still reads and searches: acme's
// searches take at most their organization's share of the connections.
func TestSearchIsolation(t *testing.T) {
	t.Parallel()
	f := newGuardFix(t, store.Config{MaxConns: 4, SearchMaxConns: 3, SearchMaxConnsPerOrg: 2,
		SearchTimeout: time.Hour, SearchQueueTimeout: time.Hour})
	conn, unlock := lockTable(t, f.db, "skills")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var done int
	var errs []error
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			_, err := f.db.Search(ctx, f.acme, store.SearchQuery{Q: "login", Kind: "skill"})
			mu.Lock()
			defer mu.Unlock()
			done++
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	storetest.WaitFor(t, "acme's searches to wait for the lock", func() bool { return lockWaiters(t, conn) >= 2 })
	read := make(chan error, 1)
	go func() {
		items, err := f.db.ListItems(ctx, f.globex, "GLX", store.ItemFilter{Limit: 5})
		if err == nil && len(items) != 1 {
			err = fmt.Errorf("globex read %d items, want 1", len(items))
		}
		if err == nil {
			var hits []store.SearchHit
			hits, err = f.db.Search(ctx, f.globex, store.SearchQuery{Q: "login", Kind: "item"})
			if err == nil && (len(hits) != 1 || hits[0].Key != "GLX-1") {
				err = fmt.Errorf("globex search found %v, want GLX-1", keysOf(hits))
			}
		}
		read <- err
	}()
	var readErr error
	storetest.WaitFor(t, "globex's read and search while acme's searches are stuck", func() bool {
		select {
		case readErr = <-read:
			return true
		default:
			return false
		}
	})
	if readErr != nil {
		t.Fatal(readErr)
	}
	mu.Lock()
	finished := done
	mu.Unlock()
	if finished != 0 {
		t.Fatalf("%d of acme's searches finished before the lock was released", finished)
	}
	if n := lockWaiters(t, conn); n != 2 {
		t.Fatalf("%d searches hold a connection, want acme's share of 2", n)
	}
	unlock()
	wg.Wait()
	if len(errs) != 0 {
		t.Fatalf("acme's searches after the lock: %d failed, first: %v", len(errs), errs[0])
	}
}

func TestSearchQueueRefusal(t *testing.T) {
	t.Parallel()
	f := newGuardFix(t, store.Config{MaxConns: 4, SearchMaxConns: 2, SearchMaxConnsPerOrg: 1,
		SearchTimeout: time.Hour, SearchQueueTimeout: 50 * time.Millisecond})
	conn, unlock := lockTable(t, f.db, "skills")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := f.db.Search(ctx, f.acme, store.SearchQuery{Q: "login", Kind: "skill"})
		first <- err
	}()
	storetest.WaitFor(t, "acme's first search to wait for the lock", func() bool { return lockWaiters(t, conn) == 1 })
	_, err := f.db.Search(ctx, f.acme, store.SearchQuery{Q: "login", Kind: "item"})
	wantCode(t, err, store.CodeExhausted, "this organization already runs 1 searches at once; try again shortly")
	_, err = f.db.SearchKnowledge(ctx, f.acme, "acme", store.KnowledgeSearch{Q: "login"})
	wantCode(t, err, store.CodeExhausted, "try again shortly")
	if _, err := f.db.SearchKnowledge(ctx, f.globex, "globex", store.KnowledgeSearch{Q: "login"}); err != nil {
		t.Fatalf("globex's search while acme's share is taken: %v", err)
	}
	unlock()
	if err := <-first; err != nil {
		t.Fatalf("acme's first search: %v", err)
	}
}

func TestSearchConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*store.Config)
		want string
	}{
		{"timeout", func(c *store.Config) { c.SearchTimeout = 0 }, "database.search_timeout: must be positive"},
		{"max conns", func(c *store.Config) { c.SearchMaxConns = 20 }, "database.search_max_conns: must be at least 1 and less than database.max_conns (20), got 20"},
		{"max conns zero", func(c *store.Config) { c.SearchMaxConns = 0 }, "database.search_max_conns:"},
		{"per org", func(c *store.Config) { c.SearchMaxConnsPerOrg = 6 }, "database.search_max_conns_per_org: must be 1 to database.search_max_conns (5), got 6"},
		{"queue timeout", func(c *store.Config) { c.SearchQueueTimeout = -time.Second }, "database.search_queue_timeout:"},
		{"terms", func(c *store.Config) { c.SearchMaxTerms = 33 }, "database.search_max_terms: must be 1-32, got 33"},
		{"chars", func(c *store.Config) { c.SearchMaxChars = 0 }, "database.search_max_chars: must be 1-10000, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := store.DefaultConfig()
			tc.set(&cfg)
			if err := cfg.Validate(); err == nil || err.Error() != tc.want && !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	if err := store.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
