package api

import (
	"encoding/base64"
	stdjson "encoding/json"
	"strings"

	"github.com/balletplanner/ballet/store"
)

const (
	// apiTokenChars is the length of an API token after store.TokenPrefix:
	// 32 random bytes in unpadded base64url (store.CreateAPIToken).
	apiTokenChars = 43
	apiTokenBytes = 32
	// maxJWTBytes bounds an OIDC token; real ones are a few KiB at most.
	maxJWTBytes = 16 << 10
)

// checkTokenShape refuses, before any look-up, a token that cannot be ours:
// one with store.TokenPrefix that is not the prefix and 43 base64url
// characters (32 bytes), and any other that is not a JWT — three base64url
// parts, a JSON header with an alg and a JSON object of claims — or any
// other at all when auth.oidc.issuer_url is not set. Such a token costs no
// database read and no request to the issuer.
func (s *Server) checkTokenShape(token string) *store.Error {
	if rest, ok := strings.CutPrefix(token, store.TokenPrefix); ok {
		if len(rest) != apiTokenChars {
			return malformed("an API token is %s and %d characters, got %d", store.TokenPrefix, apiTokenChars, len(rest))
		}
		if raw, err := base64.RawURLEncoding.Strict().DecodeString(rest); err != nil || len(raw) != apiTokenBytes {
			return malformed("an API token is %s and %d base64url characters", store.TokenPrefix, apiTokenChars)
		}
		return nil
	}
	if s.oidc == nil {
		return malformed("not an API token (%s…)", store.TokenPrefix)
	}
	if !jwtShaped(token) {
		return malformed("neither an API token (%s…) nor a JWT", store.TokenPrefix)
	}
	return nil
}

// malformed is the 401 of a token refused by its shape.
func malformed(format string, args ...any) *store.Error {
	return store.Errorf(store.CodeUnauthenticated, "invalid token: malformed: "+format, args...)
}

// jwtShaped reports whether token parses as a compact JWS: it says nothing
// of its signature or claims.
func jwtShaped(token string) bool {
	if len(token) > maxJWTBytes {
		return false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return false
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if !decodeJWTPart(parts[0], &header) || header.Alg == "" {
		return false
	}
	var claims map[string]stdjson.RawMessage
	if !decodeJWTPart(parts[1], &claims) || claims == nil {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[2], "="))
	return err == nil
}

// decodeJWTPart decodes one base64url part of a JWT (padding tolerated, as
// the verifier does) as JSON into v.
func decodeJWTPart(part string, v any) bool {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
	return err == nil && stdjson.Unmarshal(raw, v) == nil
}
