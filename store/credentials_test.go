package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// llmTenant inserts an organization with one project and returns their ids.
func llmTenant(t testing.TB, db *store.DB) (orgID, projectID string) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	if err := db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ($1, 'Org') RETURNING id::text`,
		"org-"+suffix).Scan(&orgID); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, 'WEB', 'Web') RETURNING id::text`,
		orgID).Scan(&projectID); err != nil {
		t.Fatal(err)
	}
	return orgID, projectID
}

func sealed(org, project, provider, fp string) store.Credential {
	return store.Credential{OrganizationID: org, ProjectID: project, Provider: provider,
		Ciphertext: []byte("cipher-" + fp), Nonce: make([]byte, 12), KeyID: "k1", Fingerprint: fp, CreatedBy: "alice"}
}

func TestCredentialsPutGetDeleteAndResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, project := llmTenant(t, db)

	if _, err := db.PutCredential(ctx, sealed(org, "", store.ProviderOpenAI, "org-1")); err != nil {
		t.Fatal(err)
	}
	// A second put replaces the first.
	if _, err := db.PutCredential(ctx, sealed(org, "", store.ProviderOpenAI, "org-2")); err != nil {
		t.Fatal(err)
	}
	c := sealed(org, project, store.ProviderAnthropic, "proj-1")
	c.BaseURL = "http://localhost:9999"
	if _, err := db.PutCredential(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetCredential(ctx, org, "", store.ProviderOpenAI)
	if err != nil || got.Fingerprint != "org-2" || got.ProjectID != "" {
		t.Fatalf("get org credential = %+v, %v", got, err)
	}
	if _, err := db.GetCredential(ctx, org, project, store.ProviderOpenAI); !store.IsCode(err, store.CodeNotFound) {
		t.Fatalf("project openai credential: err = %v, want not_found", err)
	}
	scope, err := db.ResolveLLMScope(ctx, org, project)
	if err != nil {
		t.Fatal(err)
	}
	if scope.ProjectKey != "WEB" || len(scope.Credentials) != 2 || scope.Credentials[0].ProjectID != project ||
		scope.Credentials[0].BaseURL != "http://localhost:9999" || scope.Credentials[1].Fingerprint != "org-2" {
		t.Fatalf("scope = %+v", scope)
	}
	list, err := db.ListCredentials(ctx, org, project)
	if err != nil || len(list) != 1 {
		t.Fatalf("list = %v, %v", list, err)
	}
	if err := db.DeleteCredential(ctx, org, project, store.ProviderAnthropic); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteCredential(ctx, org, project, store.ProviderAnthropic); !store.IsCode(err, store.CodeNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestCredentialsRejectBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, _ := llmTenant(t, db)
	otherOrg, otherProject := llmTenant2(t, db)
	_ = otherOrg
	tests := []struct {
		name string
		c    store.Credential
		code store.Code
	}{
		{"unknown provider", sealed(org, "", "gemini", "x"), store.CodeInvalid},
		{"unsealed", store.Credential{OrganizationID: org, Provider: "openai"}, store.CodeInvalid},
		{"project of another organization", sealed(org, otherProject, "openai", "x"), store.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := db.PutCredential(ctx, tt.c); !store.IsCode(err, tt.code) {
				t.Fatalf("err = %v, want %s", err, tt.code)
			}
		})
	}
	if _, err := db.ResolveLLMScope(ctx, org, otherProject); !store.IsCode(err, store.CodeNotFound) {
		t.Fatalf("resolve foreign project: %v", err)
	}
}

func llmTenant2(t *testing.T, db *store.DB) (string, string) {
	t.Helper()
	var org, project string
	ctx := context.Background()
	if err := db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ('other-org', 'Other') RETURNING id::text`).Scan(&org); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, 'OTH', 'Other') RETURNING id::text`, org).Scan(&project); err != nil {
		t.Fatal(err)
	}
	return org, project
}
