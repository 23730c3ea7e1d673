package gateway

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/balletplanner/ballet/store"
)

// ErrNoCredentialsKey is returned when credentials must be sealed or opened
// but no gateway.credentials_key is configured.
var ErrNoCredentialsKey = errors.New("gateway: no credentials key configured (gateway.credentials_key or gateway.credentials_key_file)")

// Sealer encrypts provider API keys at rest with AES-256-GCM.
type Sealer struct {
	aead  cipher.AEAD
	keyID string
}

// NewSealer returns a sealer for a 32-byte key. Its key id is derived from
// the key, so rows sealed with another key are recognised as such.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("gateway: new sealer: key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("gateway: new sealer: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gateway: new sealer: %w", err)
	}
	sum := sha256.Sum256(append([]byte("ballet-credentials-key:"), key...))
	return &Sealer{aead: aead, keyID: hex.EncodeToString(sum[:6])}, nil
}

// KeyID names the sealer's key.
func (s *Sealer) KeyID() string { return s.keyID }

// Seal encrypts a plaintext API key with a fresh 12-byte nonce.
func (s *Sealer) Seal(plaintext []byte) (ciphertext, nonce []byte, keyID, fingerprint string) {
	nonce = make([]byte, s.aead.NonceSize())
	rand.Read(nonce) // never fails (crypto/rand panics instead)
	return s.aead.Seal(nil, nonce, plaintext, nil), nonce, s.keyID, Fingerprint(plaintext)
}

// Open decrypts what Seal returned.
func (s *Sealer) Open(ciphertext, nonce []byte, keyID string) ([]byte, error) {
	if keyID != s.keyID {
		return nil, fmt.Errorf("gateway: open credential: sealed with key %q, the gateway has key %q", keyID, s.keyID)
	}
	if len(nonce) != s.aead.NonceSize() {
		return nil, fmt.Errorf("gateway: open credential: nonce of %d bytes", len(nonce))
	}
	p, err := s.aead.Open(nil, nonce, ciphertext, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway: open credential: %w", err)
	}
	return p, nil
}

// SealCredential builds the stored form of an API key at organization scope
// (projectID empty) or project scope, ready for store.PutCredential.
func (s *Sealer) SealCredential(organizationID, projectID, provider, apiKey, baseURL, createdBy string) store.Credential {
	ct, nonce, keyID, fp := s.Seal([]byte(apiKey))
	return store.Credential{
		OrganizationID: organizationID, ProjectID: projectID, Provider: provider,
		Ciphertext: ct, Nonce: nonce, KeyID: keyID, Fingerprint: fp,
		BaseURL: baseURL, CreatedBy: createdBy,
	}
}

// OpenCredential returns the plaintext API key of a stored credential.
func (s *Sealer) OpenCredential(c store.Credential) (string, error) {
	p, err := s.Open(c.Ciphertext, c.Nonce, c.KeyID)
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// Fingerprint identifies an API key without revealing it: the first 12 hex
// digits of its SHA-256, e.g. "sha256:3f2a9c01b4de".
func Fingerprint(apiKey []byte) string {
	sum := sha256.Sum256(apiKey)
	return "sha256:" + hex.EncodeToString(sum[:6])
}
