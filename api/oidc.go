package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/balletplanner/ballet/store"
)

const (
	// oidcTimeout bounds one discovery or JWKS request to the issuer.
	oidcTimeout = 10 * time.Second
	// oidcRetryAfter is how long a failed discovery is remembered before
	// the next request tries again.
	oidcRetryAfter = 15 * time.Second
)

// errIssuerUnavailable marks the 401 of a token that could not be checked
// because the issuer is unreachable: it says nothing about the token, so
// the failed-authentication limit does not count it.
var errIssuerUnavailable = errors.New("the OIDC issuer is unavailable")

// oidcVerifier checks JWTs of the configured OpenID Connect issuer against
// its JWKS. Discovery runs on first use, not at start, so an unreachable
// issuer never stops the api: requests then get 401 saying so, the failure is
// logged, and discovery is tried again after oidcRetryAfter.
type oidcVerifier struct {
	cfg    OIDCConfig
	client *http.Client
	log    *slog.Logger

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	failed   error
	failedAt time.Time

	// seen holds subjects known to have a subjects row, to spare a write per request.
	seen sync.Map
}

func newOIDCVerifier(cfg OIDCConfig, log *slog.Logger) *oidcVerifier {
	return &oidcVerifier{cfg: cfg, client: &http.Client{Timeout: oidcTimeout}, log: log}
}

// identity is what a verified token says about its holder.
type identity struct {
	Subject string `json:"sub"`
	Email   string `json:"email"`
	Name    string `json:"name"`
}

// load returns the verifier, discovering the issuer when not yet done.
func (v *oidcVerifier) load(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	if v.failed != nil && time.Since(v.failedAt) < oidcRetryAfter {
		return nil, v.failed
	}
	// The key set keeps this context for its later JWKS fetches: detach it
	// from the request, and carry the client with its timeout.
	octx := oidc.ClientContext(context.WithoutCancel(ctx), v.client)
	dctx, cancel := context.WithTimeout(octx, oidcTimeout)
	defer cancel()
	provider, err := oidc.NewProvider(dctx, v.cfg.IssuerURL)
	if err != nil {
		v.failed, v.failedAt = err, time.Now()
		v.log.ErrorContext(ctx, "oidc discovery failed; OIDC tokens are refused until it succeeds",
			slog.String("issuer", v.cfg.IssuerURL), slog.Any("error", err))
		return nil, err
	}
	v.verifier = provider.VerifierContext(octx, &oidc.Config{ClientID: v.cfg.Audience})
	v.failed = nil
	v.log.InfoContext(ctx, "oidc issuer discovered", slog.String("issuer", v.cfg.IssuerURL))
	return v.verifier, nil
}

// verify checks the signature, issuer, audience and expiry of raw and
// returns its holder; every failure is unauthenticated.
func (v *oidcVerifier) verify(ctx context.Context, raw string) (identity, error) {
	verifier, err := v.load(ctx)
	if err != nil {
		return identity{}, fmt.Errorf("api: oidc: %w: %w", errIssuerUnavailable, store.Errorf(store.CodeUnauthenticated,
			"OIDC issuer %s is unavailable, so the token cannot be checked: %v", v.cfg.IssuerURL, err))
	}
	tok, err := verifier.Verify(ctx, raw)
	var expired *oidc.TokenExpiredError
	switch {
	case errors.As(err, &expired):
		return identity{}, store.Errorf(store.CodeUnauthenticated, "token expired at %s", expired.Expiry.UTC().Format(time.RFC3339))
	case err != nil:
		return identity{}, store.Errorf(store.CodeUnauthenticated, "invalid token: %v", err)
	}
	var id identity
	if err := tok.Claims(&id); err != nil {
		return identity{}, store.Errorf(store.CodeUnauthenticated, "invalid token claims: %v", err)
	}
	if id.Subject == "" {
		return identity{}, store.Errorf(store.CodeUnauthenticated, "invalid token: sub is empty")
	}
	id.Subject = OIDCSubject(v.cfg.IssuerURL, id.Subject)
	if err := store.ValidateSubjectID(id.Subject); err != nil {
		if limit := 255 - len(OIDCSubject(v.cfg.IssuerURL, "")); len(tok.Subject) > limit {
			return identity{}, store.Errorf(store.CodeUnauthenticated, "invalid token: sub: at most %d bytes with this issuer, got %d", limit, len(tok.Subject))
		}
		msg := err.Error()
		if se := store.AsError(err); se != nil {
			msg = se.Message
		}
		return identity{}, store.Errorf(store.CodeUnauthenticated, "invalid token: sub: %s", strings.TrimPrefix(msg, "subject: "))
	}
	id.Name, id.Email = cleanClaim(id.Name), cleanClaim(id.Email)
	return id, nil
}

// OIDCSubject is the subject that an OIDC token of issuer with claim sub
// acts as: "oidc:<issuer>#<sub>". The prefix keeps OIDC users apart from
// local and API-token subjects (a token with sub "root" is never the
// local "root"), and role bindings for OIDC users name this form.
func OIDCSubject(issuer, sub string) string { return "oidc:" + issuer + "#" + sub }

// cleanClaim makes a display claim storable: valid UTF-8, no NUL, at most
// 255 bytes.
func cleanClaim(v string) string {
	v = strings.ReplaceAll(strings.ToValidUTF8(v, "\uFFFD"), "\x00", "")
	if len(v) > 255 {
		v = strings.ToValidUTF8(v[:255], "")
	}
	return v
}

// oidcSubject verifies an OIDC token and returns its subject, giving a
// subject seen for the first time its subjects row (kind human).
func (s *Server) oidcSubject(ctx context.Context, raw string) (string, error) {
	id, err := s.oidc.verify(ctx, raw)
	if err != nil {
		return "", err
	}
	if _, ok := s.oidc.seen.Load(id.Subject); ok {
		return id.Subject, nil
	}
	if _, err := s.db.EnsureSubject(ctx, store.Subject{ID: id.Subject, Kind: store.ActorHuman,
		DisplayName: id.Name, Email: id.Email}); err != nil {
		return "", fmt.Errorf("api: oidc subject: %w", err)
	}
	s.oidc.seen.Store(id.Subject, struct{}{})
	return id.Subject, nil
}
