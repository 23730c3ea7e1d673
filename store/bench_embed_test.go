package store_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/jackc/pgx/v5"
)

// benchItemsSQL fills project $1 with $2 tickets of varied words.
const benchItemsSQL = `
	INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
	SELECT $1, n, 'DEMO-' || n, 'ticket',
	       initcap(w[1 + n % 13]) || ' ' || w[1 + (n / 13) % 13] || ' ' || v[1 + n % 7] || ' ' || n,
	       'As a user I want the ' || w[1 + (n / 7) % 13] || ' to ' || v[1 + (n / 3) % 7] || ' the ' ||
	       w[1 + (n / 11) % 13] || ' so that the ' || w[1 + (n / 17) % 13] || ' works. ' || repeat('Details follow. ', 10),
	       'backlog', 'feature', 'agent', 'auto', 'bench'
	FROM generate_series(1, $2::int) AS n,
	     (SELECT ARRAY['login', 'checkout', 'payment', 'search', 'profile', 'invoice', 'cart', 'catalog',
	                   'notification', 'dashboard', 'export', 'authentication', 'onboarding'] AS w,
	             ARRAY['redesign', 'fix', 'speed up', 'localize', 'document', 'test', 'refactor'] AS v) words`

// benchFix is one organization with a project DEMO of n items and an
// engineer bound to the project.
type benchFix struct {
	db     *store.DB
	org    store.Organization
	p      store.Project
	caller store.Caller
}

func newBenchFix(b *testing.B, n int) benchFix {
	b.Helper()
	ctx := context.Background()
	db := storetest.New(b)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "bench", "Bench", sys)
	if err != nil {
		b.Fatal(err)
	}
	p, err := db.CreateProject(ctx, org.ID, "DEMO", "Demo", sys)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, benchItemsSQL, p.ID, n); err != nil {
		b.Fatal(err)
	}
	// VACUUM flushes the GIN pending lists, as autovacuum does in steady state.
	if _, err := db.Pool().Exec(ctx, `VACUUM ANALYZE items`); err != nil {
		b.Fatal(err)
	}
	caller := store.HumanCaller(&store.Principal{Subject: "bench", Kind: store.ActorHuman, Bindings: []store.RoleBinding{{
		Role: store.RoleEngineer, Scope: store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: p.ID}}}})
	return benchFix{db: db, org: org, p: p, caller: caller}
}

// randomEmbedder gives dense random unit vectors of dims dimensions, the
// shape of a real model's (the fake's are sparse).
type randomEmbedder struct{ dims int }

func (randomEmbedder) Model() string { return "random" }

func (e randomEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range texts {
		out[i] = randomVector(rand.New(rand.NewPCG(uint64(i), 7)), e.dims)
	}
	return out, nil
}

func randomVector(r *rand.Rand, dims int) []float32 {
	v := make([]float32, dims)
	var ss float64
	for i := range v {
		x := r.NormFloat64()
		v[i], ss = float32(x), ss+x*x
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(ss))
	}
	return v
}

func vectorBytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// storeVectors writes a vector of model for every item of the fixture
// straight into search_embeddings (COPY), as IndexEmbedScope would store
// it: the fake's embedding of the item's text for model "m1", else dense
// random vectors of dims dimensions.
func storeVectors(b *testing.B, f benchFix, model string, dims int) {
	b.Helper()
	ctx := context.Background()
	rows, err := f.db.Pool().Query(ctx, `SELECT id, key || E'\n' || title || E'\n' || description FROM items WHERE project_id = $1`, f.p.ID)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var data [][]any
	for rows.Next() {
		var id [16]byte
		var text string
		if err := rows.Scan(&id, &text); err != nil {
			b.Fatal(err)
		}
		v := fakellm.Embed(text)
		if model != "m1" {
			v = randomVector(r, dims)
		}
		data = append(data, []any{"item", id, f.org.ID, f.p.ID, model, []byte{0}, vectorBytes(v)})
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if _, err := f.db.Pool().CopyFrom(ctx, pgx.Identifier{"search_embeddings"},
		[]string{"entity_type", "entity_id", "organization_id", "project_id", "model", "content_hash", "embedding"},
		pgx.CopyFromRows(data)); err != nil {
		b.Fatal(err)
	}
	if _, err := f.db.Pool().Exec(ctx, `VACUUM ANALYZE search_embeddings`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSearchSemantic searches the items of one project as an
// engineer bound to it, with the vector leg over every item's vector and
// without it (lexical legs only), and times the vector leg alone, at
// 10,000 and 100,000 items, with the fake's 256-dimension vectors and with
// dense 1,536-dimension ones. "outage" is in no item's text: the lexical
// legs find nothing quickly and the difference is the vector leg's.
func BenchmarkSearchSemantic(b *testing.B) {
	for _, bc := range []struct {
		items, dims int
	}{{10000, 256}, {100000, 256}, {10000, 1536}, {100000, 1536}} {
		b.Run(fmt.Sprintf("items=%d/dims=%d", bc.items, bc.dims), func(b *testing.B) {
			f := newBenchFix(b, bc.items)
			var e store.Embedder = fakeEmbedder{model: "m1"}
			if bc.dims != fakellm.Dimensions {
				e = randomEmbedder{dims: bc.dims}
			}
			storeVectors(b, f, e.Model(), bc.dims)
			es := func(string, string) store.Embedder { return e }
			for _, leg := range []struct {
				name string
				es   store.Embedders
			}{{"vector", es}, {"lexical", nil}} {
				b.Run(leg.name, func(b *testing.B) {
					for b.Loop() {
						_, err := f.db.Search(context.Background(), f.caller,
							store.SearchQuery{Q: "outage", Kind: store.SearchItems, Project: "DEMO", Embedders: leg.es})
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("leg-alone", func(b *testing.B) {
				for b.Loop() {
					ids, err := store.RankItems(context.Background(), f.db, es, f.org.ID, f.p.ID, "outage")
					if err != nil || len(ids) == 0 {
						b.Fatalf("%d ids, %v", len(ids), err)
					}
				}
			})
		})
	}
}

// BenchmarkIndexEmbedScope embeds a project of 10,000 and of 100,000
// items from nothing, batch 64, with the in-process fake embedder (so it
// measures the store's side: finding stale entities, hashing, upserting),
// and reports items/s; then the call that finds an up-to-date scope, and
// a task's work after one edit (the call that re-embeds it and the call
// that finds the scope up to date).
func BenchmarkIndexEmbedScope(b *testing.B) {
	for _, items := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) { benchIndexEmbedScope(b, items) })
	}
}

func benchIndexEmbedScope(b *testing.B, items int) {
	ctx := context.Background()
	f := newBenchFix(b, items)
	s := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.p.ID}
	e := fakeEmbedder{model: "m1"}
	fill := func(b *testing.B) int {
		total := 0
		for {
			n, err := f.db.IndexEmbedScope(ctx, e, s, 64)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				return total
			}
			total += n
		}
	}
	b.Run("from-empty", func(b *testing.B) {
		var elapsed time.Duration
		runs := 0
		for b.Loop() {
			b.StopTimer()
			if _, err := f.db.Pool().Exec(ctx, `DELETE FROM search_embeddings`); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			total := fill(b)
			elapsed += time.Since(start)
			runs++
			if total != items {
				b.Fatalf("embedded %d, want %d", total, items)
			}
		}
		b.ReportMetric(float64(items*runs)/elapsed.Seconds(), "items/s")
	})
	// An up-to-date scope: one call that finds nothing to do.
	b.Run("up-to-date", func(b *testing.B) {
		for b.Loop() {
			if n, err := f.db.IndexEmbedScope(ctx, e, s, 64); err != nil || n != 0 {
				b.Fatalf("%d, %v", n, err)
			}
		}
	})
	b.Run("one-edit", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if _, err := f.db.Pool().Exec(ctx, `UPDATE items SET title = title || '.' WHERE project_id = $1 AND number = 1`, f.p.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if n := fill(b); n != 1 {
				b.Fatalf("embedded %d, want 1", n)
			}
		}
	})
}

// BenchmarkVectorDecode compares the stored forms of a vector: 10,000
// vectors of 256 dimensions read and compared with a query, as real[]
// (scanned into []float32), as bytea decoded into []float32, and as bytea
// compared from the row's raw bytes (what the semantic leg does).
func BenchmarkVectorDecode(b *testing.B) {
	ctx := context.Background()
	db := storetest.New(b)
	if _, err := db.Pool().Exec(ctx, `CREATE TABLE vecs (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), a real[] NOT NULL, b bytea NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var data [][]any
	for range 10000 {
		v := randomVector(r, 256)
		data = append(data, []any{v, vectorBytes(v)})
	}
	if _, err := db.Pool().CopyFrom(ctx, pgx.Identifier{"vecs"}, []string{"a", "b"}, pgx.CopyFromRows(data)); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `VACUUM ANALYZE vecs`); err != nil {
		b.Fatal(err)
	}
	q := randomVector(r, 256)
	scan := func(b *testing.B, sql string, each func(pgx.Rows) float32) {
		for b.Loop() {
			rows, err := db.Pool().Query(ctx, sql)
			if err != nil {
				b.Fatal(err)
			}
			var best float32
			for rows.Next() {
				best = max(best, each(rows))
			}
			if rows.Err() != nil {
				b.Fatal(rows.Err())
			}
		}
	}
	b.Run("real[]", func(b *testing.B) {
		scan(b, `SELECT id, a FROM vecs`, func(rows pgx.Rows) float32 {
			var id [16]byte
			var v []float32
			if err := rows.Scan(&id, &v); err != nil {
				b.Fatal(err)
			}
			return dot(q, v)
		})
	})
	b.Run("bytea-decoded", func(b *testing.B) {
		scan(b, `SELECT id, b FROM vecs`, func(rows pgx.Rows) float32 {
			var id [16]byte
			var raw []byte
			if err := rows.Scan(&id, &raw); err != nil {
				b.Fatal(err)
			}
			v := make([]float32, len(raw)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			return dot(q, v)
		})
	})
	b.Run("bytea-raw", func(b *testing.B) {
		scan(b, `SELECT id, b FROM vecs`, func(rows pgx.Rows) float32 {
			s, _ := store.DotBytes(q, rows.RawValues()[1])
			return s
		})
	})
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
