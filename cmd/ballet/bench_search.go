package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/store"
)

func init() { benchCommands["search"] = newBenchSearchCmd }

// pathologicalQueries are what one organization searches in a loop: two
// that the query limits refuse and one within them that is still slow on
// a large organization (every title holds "lorem ipsum").
var pathologicalQueries = []string{
	strings.TrimSpace(strings.Repeat("lorem ipsum ", 40)),
	negatedTerms(100),
	strings.TrimSpace(strings.Repeat("lorem ipsum ", 8)),
}

func negatedTerms(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("-x%d", i)
	}
	return strings.Join(parts, " ")
}

// searchBenchOptions are the flags of `ballet bench search`.
type searchBenchOptions struct {
	config, modes   string
	items, searches int
	duration        time.Duration
	keep            bool
}

func newBenchSearchCmd() *cobra.Command {
	var o searchBenchOptions
	c := &cobra.Command{
		Use:   "search",
		Short: "another organization's reads while one organization runs pathological searches",
		Long: "Fills a fresh database on the configured Postgres server with one large\n" +
			"organization, then, for each --mode, runs pathological searches of that\n" +
			"organization from many goroutines while another organization lists five items\n" +
			"of its project, one read after another, and prints the other's read latency.",
		Example: "  ballet bench search --items 100000 --searches 48 --duration 30s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchSearch(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	fs := c.Flags()
	addConfigFlag(c, &o.config)
	fs.IntVar(&o.items, "items", 50000, "items of the searching organization")
	fs.IntVar(&o.searches, "searches", 24, "concurrent searches of that organization")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long each mode runs")
	fs.StringVar(&o.modes, "mode", "off,on", "comma-separated: off (no search limits, as before) and on (the configured limits)")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench database")
	return c
}

// benchSearch fills a fresh database on the configured Postgres server with
// one large organization, then, for each mode, runs pathological searches
// of that organization from many goroutines while another organization
// lists five items of its project, one read after another.
func benchSearch(ctx context.Context, o searchBenchOptions, out io.Writer) error {
	cfg, err := LoadConfig(configPath(o.config), os.Environ())
	if err != nil {
		return err
	}
	dbURL, drop, err := freshDatabase(ctx, cfg.Database)
	if err != nil {
		return err
	}
	if !o.keep {
		defer drop()
	}
	fmt.Fprintf(out, "bench search: %d items in one organization, %d concurrent searches, %s per mode, database.max_conns %d\n\n",
		o.items, o.searches, o.duration, cfg.Database.MaxConns)
	fmt.Fprintln(out, "| mode | other org reads | p50 ms | p99 ms | max ms | searches: ok | refused (400) | timed out | queue full (429) | other errors |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|")
	seeded := false
	for _, mode := range strings.Split(o.modes, ",") {
		dc := cfg.Database
		dc.URL = dbURL
		switch mode {
		case "on":
		case "off":
			dc.SearchTimeout, dc.SearchQueueTimeout = -1, -1
			dc.SearchMaxConns, dc.SearchMaxConnsPerOrg, dc.SearchMaxTerms = 1<<20, 1<<20, 1<<20
		default:
			return usageError{fmt.Sprintf("bench search: unknown mode %q", mode)}
		}
		db, err := store.Open(ctx, dc)
		if err != nil {
			return err
		}
		if !seeded {
			if err = seedSearchBench(ctx, db, o.items); err != nil {
				db.Close()
				return fmt.Errorf("bench search: seed: %w", err)
			}
			seeded = true
		}
		r, err := runSearchBench(ctx, db, o.searches, o.duration)
		db.Close()
		if err != nil {
			return fmt.Errorf("bench search (%s): %w", mode, err)
		}
		q := quantilesOf(r.reads)
		fmt.Fprintf(out, "| %s | %d | %s | %s | %s | %d | %d | %d | %d | %d |\n", mode, len(r.reads), ms(q.p50), ms(q.p99),
			ms(slices.Max(append(r.reads, 0))), r.ok, r.invalid, r.timedOut, r.exhausted, r.other)
	}
	return nil
}

// freshDatabase creates and migrates an empty database beside the
// configured one and returns its URL and a function that drops it.
func freshDatabase(ctx context.Context, dc store.Config) (string, func(), error) {
	u, err := url.Parse(dc.URL)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("bench search: database.url must be a URL")
	}
	name := fmt.Sprintf("ballet_bench_search_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, dc.URL)
	if err != nil {
		return "", nil, fmt.Errorf("bench search: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("bench search: create database: %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), dc.URL)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}
	mc := dc
	mc.URL = u.String()
	db, err := store.Open(ctx, mc)
	if err == nil {
		_, err = db.Migrate(ctx)
		db.Close()
	}
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("bench search: migrate: %w", err)
	}
	return u.String(), drop, nil
}

// seedSearchBench creates organization "big" (project BIG, n items whose
// titles and descriptions all hold "lorem ipsum") and organization "other"
// (project DEMO, 5 items).
func seedSearchBench(ctx context.Context, db *store.DB, n int) error {
	sys := store.SystemActor()
	for _, o := range []struct {
		org, project string
		items        int
	}{{"big", "BIG", n}, {"other", "DEMO", 5}} {
		org, err := db.CreateOrganization(ctx, o.org, o.org, sys)
		if err != nil {
			return err
		}
		p, err := db.CreateProject(ctx, org.ID, o.project, o.project, sys)
		if err != nil {
			return err
		}
		if _, err := db.Pool().Exec(ctx, `
			INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
			SELECT $1, n, $2 || '-' || n, 'ticket', initcap(w[1 + n % 13]) || ' ' || w[1 + (n / 13) % 13] || ' lorem ipsum ' || n,
			       'Lorem ipsum dolor sit amet ' || w[1 + (n / 7) % 13] || ' consectetur adipiscing elit. ' ||
			       repeat('Lorem ipsum dolor sit amet. ', 10), 'backlog', 'feature', 'agent', 'auto', 'bench'
			FROM generate_series(1, $3::int) AS n,
			     (SELECT ARRAY['login', 'checkout', 'payment', 'search', 'profile', 'invoice', 'cart', 'catalog',
			                   'notification', 'dashboard', 'export', 'authentication', 'onboarding'] AS w) words`,
			p.ID, o.project, o.items); err != nil {
			return err
		}
		if _, err := db.Pool().Exec(ctx, `UPDATE projects SET next_item_number = $2 WHERE id = $1`, p.ID, o.items+1); err != nil {
			return err
		}
	}
	_, err := db.Pool().Exec(ctx, `VACUUM ANALYZE items`)
	return err
}

// searchBenchResult is what one mode measured.
type searchBenchResult struct {
	reads                                   []time.Duration
	ok, invalid, timedOut, exhausted, other int
}

func runSearchBench(ctx context.Context, db *store.DB, searches int, d time.Duration) (searchBenchResult, error) {
	var res searchBenchResult
	big, err := benchOrgAdmin(ctx, db, "big")
	if err != nil {
		return res, err
	}
	other, err := benchOrgAdmin(ctx, db, "other")
	if err != nil {
		return res, err
	}
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range searches {
		wg.Go(func() {
			for n := i; runCtx.Err() == nil; n++ {
				q := pathologicalQueries[n%len(pathologicalQueries)]
				_, err := db.Search(runCtx, big, store.SearchQuery{Q: q, Kind: store.SearchItems})
				mu.Lock()
				switch {
				case err == nil:
					res.ok++
				case store.IsCode(err, store.CodeInvalid) && strings.Contains(err.Error(), "took longer"):
					res.timedOut++
				case store.IsCode(err, store.CodeInvalid):
					res.invalid++
				case store.IsCode(err, store.CodeExhausted):
					res.exhausted++
				case runCtx.Err() == nil:
					res.other++
				}
				mu.Unlock()
			}
		})
	}
	// The reads begin once the searches had a moment to take what they take.
	select {
	case <-time.After(min(time.Second, d/4)):
	case <-runCtx.Done():
	}
	for runCtx.Err() == nil {
		start := time.Now()
		got, err := db.ListItems(ctx, other, "DEMO", store.ItemFilter{Limit: 5})
		if err != nil {
			return res, fmt.Errorf("other organization's read: %w", err)
		}
		if len(got) != 5 {
			return res, fmt.Errorf("other organization's read: %d items, want 5", len(got))
		}
		res.reads = append(res.reads, time.Since(start))
	}
	wg.Wait()
	return res, nil
}

// benchOrgAdmin is an organization-admin caller of the organization key.
func benchOrgAdmin(ctx context.Context, db *store.DB, key string) (store.Caller, error) {
	org, err := db.OrganizationByKey(ctx, key)
	if err != nil {
		return store.Caller{}, err
	}
	subject := key + "-admin@bench.example.com"
	return store.HumanCaller(&store.Principal{Subject: subject, Kind: store.ActorHuman, Bindings: []store.RoleBinding{{
		Subject: subject, Role: store.RoleOrganizationAdmin,
		Scope: store.Scope{Kind: store.ScopeOrganization, OrganizationID: org.ID}}}}), nil
}
