package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// TokenPrefix starts every API token, so that leaked tokens are easy to spot.
const TokenPrefix = "blt_"

// APIToken describes a stored token; the secret itself is never stored.
type APIToken struct {
	ID         string     `json:"id"`
	Subject    string     `json:"subject"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// apiTokenColumns are what scanAPIToken reads from api_tokens.
const apiTokenColumns = `id, subject, name, prefix, created_at, expires_at, revoked_at, last_used_at`

func scanAPIToken(row pgx.Row) (APIToken, error) {
	var t APIToken
	err := row.Scan(&t.ID, &t.Subject, &t.Name, &t.Prefix, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt)
	return t, err
}

func hashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateAPIToken makes a random token for subject and returns its secret
// once; only its hash is kept. ttl 0 means it does not expire.
func (db *DB) CreateAPIToken(ctx context.Context, subject, name string, ttl time.Duration) (string, APIToken, error) {
	if len(name) > 200 {
		return "", APIToken{}, Errorf(CodeInvalid, "name: at most 200 characters")
	}
	if _, err := db.EnsureSubject(ctx, Subject{ID: subject}); err != nil {
		return "", APIToken{}, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", APIToken{}, fmt.Errorf("store: create token: %w", err)
	}
	secret := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	var expires *time.Time
	if ttl > 0 {
		e := time.Now().Add(ttl)
		expires = &e
	}
	t, err := scanAPIToken(db.pool.QueryRow(ctx, `
		INSERT INTO api_tokens (subject, name, token_hash, prefix, expires_at)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+apiTokenColumns,
		subject, name, hashToken(secret), secret[:len(TokenPrefix)+6], expires))
	if err != nil {
		return "", APIToken{}, fmt.Errorf("store: create token: %w", err)
	}
	return secret, t, nil
}

// AuthenticateToken returns the subject of a valid, unrevoked, unexpired
// token; anything else is unauthenticated. A token that does not match
// costs one read and writes nothing; a match records its last use, at most
// once a minute per token.
func (db *DB) AuthenticateToken(ctx context.Context, secret string) (string, error) {
	if !strings.HasPrefix(secret, TokenPrefix) {
		return "", Errorf(CodeUnauthenticated, "invalid token")
	}
	var (
		id, subject string
		stale       bool
	)
	err := db.pool.QueryRow(ctx, `
		SELECT id, subject, last_used_at IS NULL OR last_used_at < now() - interval '1 minute'
		FROM api_tokens
		WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		hashToken(secret)).Scan(&id, &subject, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", Errorf(CodeUnauthenticated, "invalid, expired or revoked token")
	}
	if err != nil {
		return "", fmt.Errorf("store: authenticate token: %w", err)
	}
	if stale {
		if _, err := db.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1`, id); err != nil {
			return "", fmt.Errorf("store: authenticate token: record last use: %w", err)
		}
	}
	return subject, nil
}

// RevokeAPIToken revokes one of subject's tokens.
func (db *DB) RevokeAPIToken(ctx context.Context, subject, id string) error {
	tag, err := db.pool.Exec(ctx, `
		UPDATE api_tokens SET revoked_at = now()
		WHERE id::text = $1 AND subject = $2 AND revoked_at IS NULL`, id, subject)
	if err != nil {
		return fmt.Errorf("store: revoke token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return Errorf(CodeNotFound, "token %q not found", id)
	}
	return nil
}

// ListAPITokens lists subject's tokens, newest first.
func (db *DB) ListAPITokens(ctx context.Context, subject string) ([]APIToken, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+apiTokenColumns+`
		FROM api_tokens WHERE subject = $1 ORDER BY created_at DESC`, subject)
	if err != nil {
		return nil, fmt.Errorf("store: list tokens: %w", err)
	}
	return collect(rows, scanAPIToken)
}
