package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Providers the LLM gateway can call.
const (
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"
)

// ValidProvider reports whether p names a known provider.
func ValidProvider(p string) bool { return p == ProviderAnthropic || p == ProviderOpenAI }

// Credential is a provider API key, sealed with AES-GCM by the gateway: the
// store never sees the plaintext.
type Credential struct {
	ID             string `json:"id"`
	OrganizationID string `json:"organization_id"`
	// ProjectID is empty for the organization's default.
	ProjectID  string `json:"project_id,omitempty"`
	Provider   string `json:"provider"`
	Ciphertext []byte `json:"-"`
	Nonce      []byte `json:"-"`
	// KeyID names the key the ciphertext was sealed with.
	KeyID string `json:"key_id"`
	// Fingerprint identifies the plaintext key without revealing it; it is
	// the only form of the key ever returned.
	Fingerprint string `json:"fingerprint"`
	// BaseURL overrides the provider's default endpoint (OpenAI-compatible
	// servers such as Ollama or vLLM); empty means the default.
	BaseURL   string    `json:"base_url,omitempty"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// credentialColumns are what scanCredential reads from credentials.
const credentialColumns = `id, organization_id, COALESCE(project_id::text, ''), provider, ciphertext, nonce,
	key_id, fingerprint, COALESCE(base_url, ''), created_by, created_at, updated_at`

func scanCredential(row pgx.Row) (Credential, error) {
	var c Credential
	err := row.Scan(&c.ID, &c.OrganizationID, &c.ProjectID, &c.Provider, &c.Ciphertext, &c.Nonce,
		&c.KeyID, &c.Fingerprint, &c.BaseURL, &c.CreatedBy, &c.CreatedAt, &c.UpdatedAt)
	return c, err
}

// PutCredential creates or replaces the credential of a provider at
// organization scope (ProjectID empty) or project scope.
func (db *DB) PutCredential(ctx context.Context, c Credential) (Credential, error) {
	if !ValidProvider(c.Provider) {
		return Credential{}, Errorf(CodeInvalid, "provider must be anthropic or openai, got %q", c.Provider)
	}
	if len(c.Nonce) != 12 || len(c.Ciphertext) == 0 {
		return Credential{}, Errorf(CodeInvalid, "credential is not sealed")
	}
	conflict := `(organization_id, provider) WHERE project_id IS NULL`
	if c.ProjectID != "" {
		conflict = `(project_id, provider) WHERE project_id IS NOT NULL`
	}
	row := db.pool.QueryRow(ctx, `
INSERT INTO credentials (organization_id, project_id, provider, ciphertext, nonce, key_id, fingerprint, base_url, created_by)
SELECT $1::uuid, NULLIF($2, '')::uuid, $3, $4, $5, $6, $7, NULLIF($8, ''), $9
WHERE $2 = '' OR EXISTS (SELECT 1 FROM projects WHERE id = NULLIF($2, '')::uuid AND organization_id = $1::uuid)
ON CONFLICT `+conflict+` DO UPDATE SET
    ciphertext = EXCLUDED.ciphertext, nonce = EXCLUDED.nonce, key_id = EXCLUDED.key_id,
    fingerprint = EXCLUDED.fingerprint, base_url = EXCLUDED.base_url,
    created_by = EXCLUDED.created_by, updated_at = now()
RETURNING `+credentialColumns,
		c.OrganizationID, c.ProjectID, c.Provider, c.Ciphertext, c.Nonce, c.KeyID, c.Fingerprint, c.BaseURL, c.CreatedBy)
	out, err := scanCredential(row)
	if err != nil {
		return Credential{}, fmt.Errorf("store: put credential: %w", notFound(err, "project %s of organization %s", c.ProjectID, c.OrganizationID))
	}
	return out, nil
}

// GetCredential returns the credential stored exactly at the scope given
// (no fallback from project to organization).
func (db *DB) GetCredential(ctx context.Context, organizationID, projectID, provider string) (Credential, error) {
	row := db.pool.QueryRow(ctx, `SELECT `+credentialColumns+` FROM credentials
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid AND provider = $3`,
		organizationID, projectID, provider)
	c, err := scanCredential(row)
	if err != nil {
		return Credential{}, fmt.Errorf("store: get credential: %w", notFound(err, "%s credential", provider))
	}
	return c, nil
}

// ListCredentials returns the credentials stored exactly at the scope given.
func (db *DB) ListCredentials(ctx context.Context, organizationID, projectID string) ([]Credential, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+credentialColumns+` FROM credentials
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid ORDER BY provider`,
		organizationID, projectID)
	if err != nil {
		return nil, fmt.Errorf("store: list credentials: %w", err)
	}
	out, err := collect(rows, scanCredential)
	if err != nil {
		return nil, fmt.Errorf("store: list credentials: %w", err)
	}
	return out, nil
}

// DeleteCredential removes the credential stored exactly at the scope given.
func (db *DB) DeleteCredential(ctx context.Context, organizationID, projectID, provider string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM credentials
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid AND provider = $3`,
		organizationID, projectID, provider)
	if err != nil {
		return fmt.Errorf("store: delete credential: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: delete credential: %w", Errorf(CodeNotFound, "%s credential not found", provider))
	}
	return nil
}

// LLMScope is what the gateway needs to serve a call for a project: the
// keys used as metric labels, the candidate credentials (the project's
// overrides first, then the organization's defaults) and the effective limits.
type LLMScope struct {
	OrganizationID  string
	OrganizationKey string
	ProjectID       string
	ProjectKey      string // empty for an organization-level call
	Credentials     []Credential
	Limits          Limits
	// Models is the allow-lists of models in force (model_allowlists.go).
	Models ModelRule
}

// ResolveLLMScope loads the LLM scope of a project of an organization, or
// of the organization alone when projectID is empty. An unknown organization,
// or a project outside it, is not_found.
func (db *DB) ResolveLLMScope(ctx context.Context, organizationID, projectID string) (LLMScope, error) {
	s := LLMScope{OrganizationID: organizationID, ProjectID: projectID}
	err := db.pool.QueryRow(ctx, `
SELECT o.key, COALESCE((SELECT p.key FROM projects p WHERE p.id = NULLIF($2, '')::uuid AND p.organization_id = o.id), '')
FROM organizations o WHERE o.id = $1::uuid`, organizationID, projectID).Scan(&s.OrganizationKey, &s.ProjectKey)
	if err != nil {
		return LLMScope{}, fmt.Errorf("store: resolve llm scope: %w", notFound(err, "organization %s", organizationID))
	}
	if projectID != "" && s.ProjectKey == "" {
		return LLMScope{}, fmt.Errorf("store: resolve llm scope: %w", Errorf(CodeNotFound, "project %s not found", projectID))
	}
	rows, err := db.pool.Query(ctx, `SELECT `+credentialColumns+` FROM credentials
WHERE organization_id = $1::uuid AND (project_id IS NULL OR project_id = NULLIF($2, '')::uuid)
ORDER BY project_id IS NULL, provider`, organizationID, projectID)
	if err != nil {
		return LLMScope{}, fmt.Errorf("store: resolve llm scope: %w", err)
	}
	s.Credentials, err = collect(rows, scanCredential)
	if err != nil {
		return LLMScope{}, fmt.Errorf("store: resolve llm scope: %w", err)
	}
	if s.Limits, err = db.EffectiveLimits(ctx, organizationID, projectID); err != nil {
		return LLMScope{}, fmt.Errorf("store: resolve llm scope: %w", err)
	}
	if s.Models, err = db.EffectiveModelRule(ctx, organizationID, projectID); err != nil {
		return LLMScope{}, fmt.Errorf("store: resolve llm scope: %w", err)
	}
	return s, nil
}
