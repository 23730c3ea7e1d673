package store_test

import (
	"context"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestMigrateTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	n, err := db.Migrate(ctx)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if n != 0 {
		t.Fatalf("second migrate applied %d migrations, want 0", n)
	}
	st, err := db.MigrationStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d not applied", s.Version)
		}
	}
}

func TestConcurrentMigrateFromTwoHandles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An empty database that two migrators race for.
	u := storetest.EmptyURL(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			db, err := store.Open(ctx, store.Config{URL: u, MaxConns: 2, ConnectTimeout: 5e9})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			_, err = db.Migrate(ctx)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
}
