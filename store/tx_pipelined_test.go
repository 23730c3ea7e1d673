package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// pipelinedFixture is a store on a one-connection pool that counts round
// trips, with a table to write to.
type pipelinedFixture struct {
	db      *store.DB
	pool    *pgxpool.Pool
	counter *roundTrips
}

func newPipelinedFixture(t *testing.T) pipelinedFixture {
	t.Helper()
	ctx := context.Background()
	counter := &roundTrips{}
	pc, err := pgxpool.ParseConfig(storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = counter
	pc.MaxConns = 1 // a connection left in a transaction would block the next test step
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE tx_probe (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// Warm the statement cache, so that round trips count what a busy
	// process pays.
	for range 2 {
		if _, err := pool.Exec(ctx, `INSERT INTO tx_probe VALUES ($1)`, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `DELETE FROM tx_probe`); err != nil {
			t.Fatal(err)
		}
	}
	return pipelinedFixture{db: store.New(pool), pool: pool, counter: counter}
}

// ids lists the rows of tx_probe.
func (f pipelinedFixture) ids(t *testing.T) []int {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT id FROM tx_probe ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func insert(ctx context.Context, tx pgx.Tx, id int) error {
	_, err := tx.Exec(ctx, `INSERT INTO tx_probe VALUES ($1)`, id)
	return err
}

// TestTxPipelinedCommits: whatever the first statement is, the transaction
// commits all of its writes, and BEGIN costs no round trip of its own
// unless that statement is a Query.
func TestTxPipelinedCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name  string
		first func(pgx.Tx) error
		trips int // with the second insert and COMMIT
	}{
		{"Exec", func(tx pgx.Tx) error { return insert(ctx, tx, 1) }, 3},
		{"QueryRow", func(tx pgx.Tx) error {
			var id int
			return tx.QueryRow(ctx, `INSERT INTO tx_probe VALUES (1) RETURNING id`).Scan(&id)
		}, 3},
		{"SendBatch", func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO tx_probe VALUES (1)`)
			b.Queue(`SELECT count(*) FROM tx_probe`).QueryRow(func(row pgx.Row) error {
				var n int
				if err := row.Scan(&n); err != nil {
					return err
				}
				if n != 1 {
					return errors.New("the batch does not see its own insert")
				}
				return nil
			})
			return tx.SendBatch(ctx, b).Close()
		}, 3},
		{"Query", func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `INSERT INTO tx_probe VALUES (1) RETURNING id`)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newPipelinedFixture(t)
			f.counter.take()
			err := f.db.TxPipelined(ctx, func(tx pgx.Tx) error {
				if err := c.first(tx); err != nil {
					return err
				}
				return insert(ctx, tx, 2)
			})
			if err != nil {
				t.Fatal(err)
			}
			if trips, _ := f.counter.take(); trips != c.trips {
				t.Errorf("%d round trips, want %d", trips, c.trips)
			}
			if got := f.ids(t); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("rows %v, want [1 2]", got)
			}
		})
	}
}

// TestTxPipelinedRollsBack: nothing of a transaction that fails is stored,
// whether fn fails, its first statement fails, a failed statement's error
// was dropped, or fn panics; the error is the one that happened, and the
// connection goes back to the pool outside any transaction.
func TestTxPipelinedRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refused := errors.New("refused by fn")
	cases := []struct {
		name  string
		fn    func(pgx.Tx) error
		check func(t *testing.T, err error)
	}{
		{"fn fails", func(tx pgx.Tx) error {
			if err := insert(ctx, tx, 1); err != nil {
				return err
			}
			return refused
		}, func(t *testing.T, err error) {
			if !errors.Is(err, refused) {
				t.Fatalf("error %v, want fn's", err)
			}
		}},
		{"first statement fails", func(tx pgx.Tx) error {
			return insert(ctx, tx, 7) // 7 is there already
		}, func(t *testing.T, err error) {
			var pg *pgconn.PgError
			if !errors.As(err, &pg) || pg.Code != "23505" {
				t.Fatalf("error %v, want the unique violation", err)
			}
		}},
		{"first statement of a batch fails", func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO tx_probe VALUES (7)`)
			b.Queue(`INSERT INTO tx_probe VALUES (1)`)
			return tx.SendBatch(ctx, b).Close()
		}, func(t *testing.T, err error) {
			var pg *pgconn.PgError
			if !errors.As(err, &pg) || pg.Code != "23505" {
				t.Fatalf("error %v, want the unique violation", err)
			}
		}},
		{"a failed statement's error dropped", func(tx pgx.Tx) error {
			_ = insert(ctx, tx, 1)
			_ = insert(ctx, tx, 7)
			return nil
		}, func(t *testing.T, err error) {
			if !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("error %v, want %v", err, pgx.ErrTxCommitRollback)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newPipelinedFixture(t)
			if _, err := f.pool.Exec(ctx, `INSERT INTO tx_probe VALUES (7)`); err != nil {
				t.Fatal(err)
			}
			c.check(t, f.db.TxPipelined(ctx, c.fn))
			if got := f.ids(t); !slices.Equal(got, []int{7}) {
				t.Fatalf("rows %v, want [7]", got)
			}
			if n := f.pool.Stat().AcquiredConns(); n != 0 {
				t.Fatalf("%d connections still held", n)
			}
		})
	}
	t.Run("fn panics", func(t *testing.T) {
		t.Parallel()
		f := newPipelinedFixture(t)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not reach the caller")
				}
			}()
			_ = f.db.TxPipelined(ctx, func(tx pgx.Tx) error {
				if err := insert(ctx, tx, 1); err != nil {
					return err
				}
				panic("fn panics")
			})
		}()
		if got := f.ids(t); len(got) != 0 {
			t.Fatalf("rows %v, want none", got)
		}
	})
}

// TestTxPipelinedEdges: a transaction that runs nothing sends nothing, and
// a savepoint inside one rolls back only its own writes.
func TestTxPipelinedEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPipelinedFixture(t)
	f.counter.take()
	if err := f.db.TxPipelined(ctx, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if trips, _ := f.counter.take(); trips != 0 {
		t.Fatalf("an empty transaction took %d round trips", trips)
	}
	err := f.db.TxPipelined(ctx, func(tx pgx.Tx) error {
		if err := insert(ctx, tx, 1); err != nil {
			return err
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := insert(ctx, sp, 2); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.ids(t); !slices.Equal(got, []int{1}) {
		t.Fatalf("rows %v, want [1]", got)
	}
}
