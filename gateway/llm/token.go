package llm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Token constants: every gateway token is for this audience and carries the
// capability.
const (
	Audience         = "gateway"
	CapabilityInvoke = "llm.invoke"
	tokenIssuer      = "ballet"
)

// ErrInvalidToken is wrapped by every token verification failure.
var ErrInvalidToken = errors.New("invalid gateway token")

// Bounds of gateway tokens: a signing key is at least MinKeyBytes long, and
// a token lives at most MaxTokenTTL, so that a token out of a log or a
// process listing is worth little, and a key rotation (see Keyring) revokes
// every token signed with the old key within a day at most.
const (
	MinKeyBytes = 32
	MaxTokenTTL = 24 * time.Hour
)

// KeyID names a signing key in the tokens it signs (their kid header): the
// first 16 hex digits of its SHA-256, which tells nothing of the key.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// Keyring is the keys a gateway accepts tokens of: its signing key, then
// previous ones still accepted while a rotation runs. Dropping a key from
// the ring revokes every token it signed.
type Keyring [][]byte

// key is the ring's key named kid; a token without a kid (minted before
// key ids) is tried with the first key.
func (r Keyring) key(kid string) []byte {
	if len(r) == 0 {
		return nil
	}
	if kid == "" {
		return r[0]
	}
	for _, k := range r {
		if KeyID(k) == kid {
			return k
		}
	}
	return nil
}

// Principal is who a model call is made by and for: the claims of a
// gateway token.
type Principal struct {
	// Subject is the caller, e.g. planner:<session>. Mint defaults it from
	// Session when empty.
	Subject string
	// Organization and Project are ids; Project is empty for a call made for
	// the organization as a whole.
	Organization string
	Project      string
	// Session is the planner session id, if any.
	Session string
	// ActingFor is the human subject the call is made for.
	ActingFor string
	// Capabilities are granted by the token; verification keeps them.
	Capabilities []string
}

type tokenClaims struct {
	Organization string   `json:"org"`
	Project      string   `json:"project,omitempty"`
	Session      string   `json:"session,omitempty"`
	ActingFor    string   `json:"acting_for,omitempty"`
	Capabilities []string `json:"cap"`
	jwt.RegisteredClaims
}

// Mint signs a gateway token (HS256) for p, valid for ttl, with audience
// gateway and capability llm.invoke.
func Mint(key []byte, p Principal, ttl time.Duration) (string, error) {
	if len(key) == 0 {
		return "", errors.New("gateway: mint: no signing key")
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return "", fmt.Errorf("gateway: mint: ttl must be positive and at most %s, got %s", MaxTokenTTL, ttl)
	}
	if p.Organization == "" {
		return "", errors.New("gateway: mint: no organization")
	}
	if p.Subject == "" {
		if p.Session == "" {
			return "", errors.New("gateway: mint: no subject or session")
		}
		p.Subject = "planner:" + p.Session
	}
	caps := p.Capabilities
	if len(caps) == 0 {
		caps = []string{CapabilityInvoke}
	}
	now := time.Now()
	jti := make([]byte, 12)
	rand.Read(jti)
	claims := tokenClaims{
		Organization: p.Organization, Project: p.Project, Session: p.Session, ActingFor: p.ActingFor,
		Capabilities: caps,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: tokenIssuer, Subject: p.Subject, Audience: jwt.ClaimStrings{Audience},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-30 * time.Second)),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)), ID: hex.EncodeToString(jti),
		},
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = KeyID(key)
	s, err := tok.SignedString(key)
	if err != nil {
		return "", fmt.Errorf("gateway: mint: %w", err)
	}
	return s, nil
}

// VerifyToken checks a gateway token's signature, expiry and audience and
// returns its principal. Every failure wraps ErrInvalidToken. The capability
// is not checked here: the caller decides (a missing llm.invoke is 403).
func VerifyToken(key []byte, token string) (Principal, error) {
	return Keyring{key}.Verify(token)
}

// Verify is VerifyToken with the ring's key the token names (kid). A token
// of a key no longer in the ring, or one minted to live longer than
// MaxTokenTTL, is invalid.
func (r Keyring) Verify(token string) (Principal, error) {
	if len(r) == 0 || len(r[0]) == 0 {
		return Principal{}, fmt.Errorf("%w: the gateway has no signing key", ErrInvalidToken)
	}
	var c tokenClaims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if k := r.key(kid); k != nil {
			return k, nil
		}
		return nil, errors.New("signed with a key this gateway no longer accepts (rotated out)")
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(Audience), jwt.WithIssuer(tokenIssuer), jwt.WithExpirationRequired(),
		jwt.WithLeeway(5*time.Second))
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if c.ExpiresAt.After(time.Now().Add(MaxTokenTTL+time.Minute)) ||
		(c.IssuedAt != nil && c.ExpiresAt.Sub(c.IssuedAt.Time) > MaxTokenTTL) {
		return Principal{}, fmt.Errorf("%w: a token lives at most %s", ErrInvalidToken, MaxTokenTTL)
	}
	if c.Organization == "" || c.Subject == "" {
		return Principal{}, fmt.Errorf("%w: no organization or subject", ErrInvalidToken)
	}
	if !isUUID(c.Organization) {
		return Principal{}, fmt.Errorf("%w: the organization claim is not a UUID", ErrInvalidToken)
	}
	if c.Project != "" && !isUUID(c.Project) {
		return Principal{}, fmt.Errorf("%w: the project claim is not a UUID", ErrInvalidToken)
	}
	return Principal{
		Subject: c.Subject, Organization: c.Organization, Project: c.Project, Session: c.Session,
		ActingFor: c.ActingFor, Capabilities: c.Capabilities,
	}, nil
}

// isUUID reports whether s is a UUID in its 36-character form, the form of
// every id the gateway looks up.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}

// Can reports whether the principal holds a capability.
func (p Principal) Can(capability string) bool { return slices.Contains(p.Capabilities, capability) }
