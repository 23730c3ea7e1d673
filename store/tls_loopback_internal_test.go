package store

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestPlainOnLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url string
		plain     bool
	}{
		{"loopback URL", "postgres://u@127.0.0.1:5432/db", true},
		{"localhost", "postgresql://u@localhost/db", true},
		{"IPv6 loopback", "postgres://u@[::1]:5432/db", true},
		{"keyword form", "host=127.0.0.1 port=5432 user=u dbname=db", true},
		{"remote host", "postgres://u@db.internal:5432/db", false},
		{"one remote host of two", "postgres://u@127.0.0.1:5432,10.0.0.5:5432/db", false},
		{"sslmode named", "postgres://u@127.0.0.1:5432/db?sslmode=prefer", false},
		{"sslmode require", "postgres://u@127.0.0.1:5432/db?sslmode=require", false},
		{"another ssl parameter", "postgres://u@127.0.0.1:5432/db?sslsni=0", false},
		{"keyword sslmode", "host=127.0.0.1 user=u sslmode=prefer", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pc, err := pgxpool.ParseConfig(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			tlsBefore := pc.ConnConfig.TLSConfig != nil
			plainOnLoopback(pc, tt.url)
			tls := pc.ConnConfig.TLSConfig != nil
			for _, fb := range pc.ConnConfig.Fallbacks {
				tls = tls || fb.TLSConfig != nil
			}
			switch {
			case tt.plain && tls:
				t.Fatalf("%s: TLS still tried", tt.url)
			case tt.plain && len(pc.ConnConfig.Fallbacks) != 0:
				t.Fatalf("%s: fallbacks %d, want none (one host, no TLS)", tt.url, len(pc.ConnConfig.Fallbacks))
			case !tt.plain && tlsBefore && pc.ConnConfig.TLSConfig == nil:
				t.Fatalf("%s: TLS turned off", tt.url)
			}
		})
	}
}

// PGSSLMODE chooses for every URL that does not: it is kept.
func TestPlainOnLoopbackKeepsPGSSLMODE(t *testing.T) {
	t.Setenv("PGSSLMODE", "require")
	url := "postgres://u@127.0.0.1:5432/db"
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	plainOnLoopback(pc, url)
	if pc.ConnConfig.TLSConfig == nil {
		t.Fatal("PGSSLMODE=require: TLS turned off")
	}
}
