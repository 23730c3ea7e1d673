package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// A URL to this machine's Postgres that leaves sslmode to the default
// connects without TLS; one that names sslmode=prefer gets what the
// server offers.
func TestLoopbackConnectsWithoutTLSUnlessTheURLSays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	bare, _, _ := strings.Cut(url, "?")
	if !strings.Contains(bare, "@127.0.0.1") && !strings.Contains(bare, "@localhost") {
		t.Fatalf("the test database %s is not on a loopback address", bare)
	}
	usesTLS := func(u string) bool {
		t.Helper()
		cfg := store.DefaultConfig()
		cfg.URL = u
		db, err := store.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var ssl bool
		if err := db.Pool().QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil {
			t.Fatal(err)
		}
		return ssl
	}
	if usesTLS(bare) {
		t.Fatalf("%s: TLS on a loopback connection that did not ask for it", bare)
	}
	var offered string
	db := storetest.Open(t, bare)
	if err := db.Pool().QueryRow(ctx, `SHOW ssl`).Scan(&offered); err != nil {
		t.Fatal(err)
	}
	if got := usesTLS(bare + "?sslmode=prefer"); got != (offered == "on") {
		t.Fatalf("sslmode=prefer with the server's ssl %s: TLS %v", offered, got)
	}
}
