package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

func init() { benchCommands["embed"] = newBenchEmbedCmd }

// benchEmbedModel is the embedding model the bench asks the fake for.
const benchEmbedModel = "bench-embed"

// embedBenchOptions are the flags of `ballet bench embed`.
type embedBenchOptions struct {
	config, concurrency                         string
	items, projects, sessions, messages, rounds int
	latency                                     time.Duration
	turns                                       bool
}

func newBenchEmbedCmd() *cobra.Command {
	var o embedBenchOptions
	c := &cobra.Command{
		Use:   "embed",
		Short: "embedding throughput through the embed queue, and turn throughput during a backfill",
		Long: "Measures, on a fresh database per run, how fast the embed queue embeds a\n" +
			"backfill of --items items (from the worker's start, whose backfill task marks\n" +
			"every scope, to the last vector stored) against the fake model, once per\n" +
			"--concurrency value; with --turns, the planner turn throughput without and\n" +
			"during such a backfill, in the same run.",
		Example: "  ballet bench embed --items 20000 --concurrency 1,4,8\n  ballet bench embed --turns --items 5000 --sessions 50",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchEmbed(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	fs := c.Flags()
	addConfigFlag(c, &o.config)
	fs.IntVar(&o.items, "items", 10000, "items to embed, spread over the projects")
	fs.IntVar(&o.projects, "projects", 10, "projects (embed scopes) the items are spread over")
	fs.StringVar(&o.concurrency, "concurrency", "1,2,4", "comma-separated search.embed_concurrency values, one run each")
	fs.DurationVar(&o.latency, "latency", 0, "the fake's latency before each embeddings answer")
	fs.BoolVar(&o.turns, "turns", false, "instead: planner turn throughput without, then during, a backfill of --items")
	fs.IntVar(&o.sessions, "sessions", 100, "with --turns: concurrent sessions")
	fs.IntVar(&o.messages, "messages", 5, "with --turns: messages sent into each session, one after another")
	fs.IntVar(&o.rounds, "rounds", 3, "with --turns: rounds of (alone, during a backfill)")
	return c
}

// benchEmbed measures, on a fresh database per run, how fast the embed
// queue embeds a backfill of N items (from the worker's start, whose
// backfill task marks every scope, to the last vector stored) against the
// fake model; with --turns, the planner turn throughput without and
// during such a backfill, in the same run.
func benchEmbed(ctx context.Context, o embedBenchOptions, out io.Writer) error {
	if o.rounds < 1 {
		return usageError{"bench embed: --rounds must be at least 1"}
	}
	if o.items < 1 || o.projects < 1 || o.projects > o.items {
		return usageError{"bench embed: --items and --projects must be positive, with no more projects than items"}
	}
	counts, err := parseCounts("--concurrency", o.concurrency)
	if err != nil {
		return err
	}
	cfg, err := LoadConfig(configPath(o.config), os.Environ())
	if err != nil {
		return err
	}
	cfg.Log.Level = "error"
	script := fmt.Sprintf("loop: true\nanswers:\n  - content:\n      - text: ok\nembeddings:\n  latency: %s\n", o.latency)
	fake := fakellm.New(fakellm.MustParse(script))
	if err := fake.Start(); err != nil {
		return err
	}
	defer fake.Close()
	if o.turns {
		return benchEmbedTurns(ctx, cfg, out, fake.URL(), o.items, o.projects, o.sessions, o.messages, o.rounds, o.latency)
	}
	fmt.Fprintf(out, "bench embed: %d items in %d projects, embed batch %d, embed delay %s, fake embeddings latency %s, GOMAXPROCS %d\n\n",
		o.items, o.projects, cfg.Search.EmbedBatch, cfg.Search.EmbedDelay, o.latency, goruntime.GOMAXPROCS(0))
	fmt.Fprintln(out, "| embed_concurrency | items | seconds (worker start → last vector) | items/s |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, c := range counts {
		took, err := runEmbedBench(ctx, cfg, fake.URL(), o.items, o.projects, c)
		if err != nil {
			return fmt.Errorf("bench embed (concurrency %d): %w", c, err)
		}
		fmt.Fprintf(out, "| %d | %d | %.2f | %.0f |\n", c, o.items, took.Seconds(), float64(o.items)/took.Seconds())
	}
	return nil
}

// benchRuntime sets up the process's connections on a fresh database,
// seeded with items spread over projects; done drops the database.
func benchRuntime(ctx context.Context, cfg Config, items, projects int) (rt *runtime, done func(), err error) {
	dbURL, drop, err := freshDatabase(ctx, cfg.Database)
	if err != nil {
		return nil, nil, err
	}
	cfg.Database.URL = dbURL
	rt, err = setup(ctx, cfg, "bench")
	if err != nil {
		drop()
		return nil, nil, err
	}
	done = func() { rt.close(); drop() }
	if err := seedEmbedBench(ctx, rt.db, items, projects); err != nil {
		done()
		return nil, nil, fmt.Errorf("seed: %w", err)
	}
	return rt, done, nil
}

// seedEmbedBench creates organization "embed" with projects E1…EP and
// items spread over them, and takes the marks the inserts made: the
// worker's backfill marks them again at its start.
func seedEmbedBench(ctx context.Context, db *store.DB, items, projects int) error {
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "embed", "Embed", sys)
	if err != nil {
		return err
	}
	for i := range projects {
		key := fmt.Sprintf("E%d", i+1)
		p, err := db.CreateProject(ctx, org.ID, key, key, sys)
		if err != nil {
			return err
		}
		n := items / projects
		if i < items%projects {
			n++
		}
		if _, err := db.Pool().Exec(ctx, `
			INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
			SELECT $1, n, $2 || '-' || n, 'ticket', initcap(w[1 + n % 13]) || ' ' || w[1 + (n / 13) % 13] || ' ' || n,
			       'Customers report ' || w[1 + (n / 7) % 13] || ' trouble; see item ' || n || '.', 'backlog', 'feature', 'agent', 'auto', 'bench'
			FROM generate_series(1, $3::int) AS n,
			     (SELECT ARRAY['login', 'checkout', 'payment', 'search', 'profile', 'invoice', 'cart', 'catalog',
			                   'notification', 'dashboard', 'export', 'outage', 'onboarding'] AS w) words`,
			p.ID, key, n); err != nil {
			return err
		}
		if _, err := db.Pool().Exec(ctx, `UPDATE projects SET next_item_number = $2 WHERE id = $1`, p.ID, n+1); err != nil {
			return err
		}
	}
	dirty, err := db.DirtyEmbedScopes(ctx, projects+10)
	if err != nil {
		return err
	}
	for _, s := range dirty {
		if _, err := db.TakeEmbedScope(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// embedPipeline builds an embeddings pipeline that embeds with the fake at
// fakeURL (directly, not through the gateway), in a namespace of its own.
func embedPipeline(rt *runtime, fakeURL string, concurrency int) (*embeddings.Service, error) {
	ns := fmt.Sprintf("bench-embed-%d-", time.Now().UnixNano())
	names := tasks.Names{Namespace: ns}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := llm.NewClient(fakeURL, []byte("bench"), nil)
	sc := rt.cfg.Search
	sc.EmbeddingsModel, sc.EmbedConcurrency = benchEmbedModel, concurrency
	return embeddings.New(embeddings.Deps{DB: rt.db, Redis: rt.rdb,
		Queue: tasks.NewQueue(rt.rdb, names, time.Hour), Log: log, Search: sc,
		Embedders: func(org, project string) store.Embedder {
			return llm.Embedder{Client: client, EmbeddingModel: benchEmbedModel,
				Who: llm.Principal{Subject: "search:index", Organization: org, Project: project}}
		}})
}

// runEmbedBench times one backfill of items from the worker's start to the
// last vector stored.
func runEmbedBench(ctx context.Context, cfg Config, fakeURL string, items, projects, concurrency int) (time.Duration, error) {
	rt, done, err := benchRuntime(ctx, cfg, items, projects)
	if err != nil {
		return 0, err
	}
	defer done()
	w, err := embedPipeline(rt, fakeURL, concurrency)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return 0, err
	}
	defer w.Stop()
	for {
		cur, _, err := rt.db.EmbeddingCounts(ctx, benchEmbedModel)
		if err != nil {
			return 0, err
		}
		if cur >= int64(items) {
			return time.Since(start), nil
		}
		if time.Since(start) > 30*time.Minute {
			return 0, fmt.Errorf("%d of %d items embedded after 30 minutes", cur, items)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// benchEmbedTurns runs the turn bench (queue mode) on one fresh database
// holding the items, in rounds: alone, then while another worker of the
// process backfills the items' embeddings (their vectors deleted first, so
// that each round's backfill is whole). It prints each run and the median
// of the rounds' ratios.
func benchEmbedTurns(ctx context.Context, cfg Config, out io.Writer, fakeURL string, items, projects, sessions, messages, rounds int, latency time.Duration) error {
	rt, done, err := benchRuntime(ctx, cfg, items, projects)
	if err != nil {
		return fmt.Errorf("bench embed: %w", err)
	}
	defer done()
	fmt.Fprintf(out, "bench embed --turns: %d sessions × %d messages, worker concurrency %d; backfill of %d items in %d projects, embed concurrency %d, batch %d, fake latency %s; %d rounds; GOMAXPROCS %d\n\n",
		sessions, messages, cfg.Worker.Concurrency, items, projects, cfg.Search.EmbedConcurrency, cfg.Search.EmbedBatch, latency, rounds, goruntime.GOMAXPROCS(0))
	fmt.Fprintln(out, "| round | run | turns | turns/s | send→done p50 | p99 | vectors stored during the run |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	var ratios []float64
	for round := 1; round <= rounds; round++ {
		rates := map[string]float64{}
		for _, run := range []string{"alone", "during backfill"} {
			rate, err := turnRun(ctx, rt, out, fakeURL, round, run, items, sessions, messages)
			if err != nil {
				return fmt.Errorf("bench embed --turns (round %d, %s): %w", round, run, err)
			}
			rates[run] = rate
		}
		ratios = append(ratios, rates["during backfill"]/rates["alone"])
	}
	slices.Sort(ratios)
	fmt.Fprintf(out, "\nturns/s during the backfill ÷ alone: median %.2f of %d rounds (min %.2f, max %.2f)\n",
		ratios[len(ratios)/2], len(ratios), ratios[0], ratios[len(ratios)-1])
	return nil
}

// turnRun runs the turn bench once, during a backfill when run says so,
// prints its row and returns its turns/s.
func turnRun(ctx context.Context, rt *runtime, out io.Writer, fakeURL string, round int, run string, items, sessions, messages int) (float64, error) {
	if run != "alone" {
		if _, err := rt.db.Pool().Exec(ctx, `DELETE FROM search_embeddings`); err != nil {
			return 0, err
		}
		w, err := embedPipeline(rt, fakeURL, rt.cfg.Search.EmbedConcurrency)
		if err != nil {
			return 0, err
		}
		if err := w.Start(ctx); err != nil {
			return 0, err
		}
		defer w.Stop()
		if err := waitVectors(ctx, rt.db); err != nil {
			return 0, err
		}
	}
	before, _, err := rt.db.EmbeddingCounts(ctx, benchEmbedModel)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	ts, err := runTurnBench(ctx, rt, fakeURL, "queue", sessions, messages)
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	after, _, err := rt.db.EmbeddingCounts(ctx, benchEmbedModel)
	if err != nil {
		return 0, err
	}
	var dn []time.Duration
	for _, t := range ts {
		dn = append(dn, t.done.Sub(t.sent))
	}
	q := quantilesOf(dn)
	rate := float64(len(ts)) / took.Seconds()
	fmt.Fprintf(out, "| %d | %s | %d | %.0f | %s ms | %s ms | %d of %d |\n", round, run, len(ts), rate, ms(q.p50), ms(q.p99), after-before, items)
	return rate, nil
}

// waitVectors waits until the backfill stores its first vectors: the turns
// run while it embeds, not while its tasks wait out the embed delay.
func waitVectors(ctx context.Context, db *store.DB) error {
	for start := time.Now(); ; {
		cur, _, err := db.EmbeddingCounts(ctx, benchEmbedModel)
		if err != nil || cur > 0 {
			return err
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("the backfill stored no vector in a minute")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
