package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestAuthenticateTokenWritesNothingOnFailure checks bad tokens on a
// read-only connection, where any write fails: a token that does not match
// is unauthenticated, not an error of a refused write.
func TestAuthenticateTokenWritesNothingOnFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	rw, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rw.Close)
	db := store.New(rw)
	good, tok, err := db.CreateAPIToken(ctx, "ann", "cli", 0)
	if err != nil {
		t.Fatal(err)
	}
	expired, _, err := db.CreateAPIToken(ctx, "ann", "old", time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	revoked, rtok, err := db.CreateAPIToken(ctx, "ann", "gone", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RevokeAPIToken(ctx, "ann", rtok.ID); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ro.Close)
	readOnly := store.New(ro)
	for name, secret := range map[string]string{
		"unknown":   store.TokenPrefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"expired":   expired,
		"revoked":   revoked,
		"no prefix": "hello",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := readOnly.AuthenticateToken(ctx, secret); !store.IsCode(err, store.CodeUnauthenticated) {
				t.Fatalf("error %v, want unauthenticated", err)
			}
		})
	}
	// A good token is accepted and its last use recorded.
	subject, err := db.AuthenticateToken(ctx, good)
	if err != nil || subject != "ann" {
		t.Fatalf("good token: %q, %v", subject, err)
	}
	var used *time.Time
	if err := rw.QueryRow(ctx, `SELECT last_used_at FROM api_tokens WHERE id = $1`, tok.ID).Scan(&used); err != nil || used == nil {
		t.Fatalf("last_used_at %v, %v; want set", used, err)
	}
}
