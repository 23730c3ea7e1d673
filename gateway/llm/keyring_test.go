package llm_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/balletplanner/ballet/gateway/llm"
)

func TestKeyringRotation(t *testing.T) {
	t.Parallel()
	old := []byte("the-old-signing-key-0123456789abcdef")
	next := []byte("the-new-signing-key-0123456789abcdef")
	p := llm.Principal{Organization: "6b1f2c8e-3a4d-4b5c-9d6e-7f8091a2b3c4", Session: "s1"}
	tok, err := llm.Mint(old, p, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ring llm.Keyring
		want string // "" valid
	}{
		{"the key itself", llm.Keyring{old}, ""},
		{"during the rotation", llm.Keyring{next, old}, ""},
		{"after the rotation", llm.Keyring{next}, "rotated out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.ring.Verify(tok)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Verify: %v", err)
			case tc.want != "" && (!errors.Is(err, llm.ErrInvalidToken) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Verify = %v, want invalid (%s)", err, tc.want)
			}
		})
	}
}

func TestTokensLiveADayAtMost(t *testing.T) {
	t.Parallel()
	key := []byte("a-signing-key-0123456789abcdef0123")
	p := llm.Principal{Organization: "6b1f2c8e-3a4d-4b5c-9d6e-7f8091a2b3c4", Session: "s1"}
	if _, err := llm.Mint(key, p, 87600*time.Hour); err == nil || !strings.Contains(err.Error(), "at most 24h0m0s") {
		t.Fatalf("mint for ten years: %v", err)
	}
	// One minted elsewhere to live ten years is refused.
	now := time.Now()
	long := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "ballet", "sub": "planner:s1", "aud": "gateway",
		"org": p.Organization, "cap": []string{llm.CapabilityInvoke}, "iat": now.Unix(), "exp": now.Add(87600 * time.Hour).Unix()})
	signed, err := long.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := llm.VerifyToken(key, signed); !errors.Is(err, llm.ErrInvalidToken) || !strings.Contains(err.Error(), "at most 24h0m0s") {
		t.Fatalf("verify a ten-year token: %v", err)
	}
	// And one that does not say when it was issued.
	noIAT := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "ballet", "sub": "planner:s1", "aud": "gateway",
		"org": p.Organization, "cap": []string{llm.CapabilityInvoke}, "exp": now.Add(87600 * time.Hour).Unix()})
	if signed, err = noIAT.SignedString(key); err != nil {
		t.Fatal(err)
	}
	if _, err := llm.VerifyToken(key, signed); !errors.Is(err, llm.ErrInvalidToken) || !strings.Contains(err.Error(), "at most 24h0m0s") {
		t.Fatalf("verify a ten-year token without iat: %v", err)
	}
}
