package api

import (
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// CredentialSealer seals a provider API key into its stored form: AES-GCM
// ciphertext, nonce, key id and fingerprint, never the plaintext. The
// gateway's Sealer is one.
type CredentialSealer interface {
	SealCredential(organizationID, projectID, provider, apiKey, baseURL, createdBy string) store.Credential
}

// UpstreamPolicy decides which endpoints a credential's base_url may name;
// the error says why one is refused. The gateway's *gateway.Upstreams is one.
type UpstreamPolicy interface {
	CheckUpstream(baseURL string) error
}

// Bounds of a credential's fields.
const (
	maxAPIKeyLen  = 4096
	maxBaseURLLen = 2048
)

// upstreamRule says what a refused base_url must match.
const upstreamRule = "a base_url must match an entry of the server's gateway.allowed_upstreams " +
	"(scheme, host, port and path prefix); ask the operator to allow a new upstream"

// Scopes of a credential or of limits, as the replies name them.
const (
	scopeOrganization = "organization"
	scopeProject      = "project"
)

// registerGateway registers the REST side of the LLM gateway: provider
// credentials, usage and limits (SPEC §9).
func (s *Server) registerGateway(r fiber.Router) {
	s.registerCredentials(r)
	s.registerUsage(r)
	s.registerLimits(r)
	s.registerModelAllowlists(r)
}

// registerCredentials registers the provider credential routes (SPEC §9).
func (s *Server) registerCredentials(r fiber.Router) {
	r.Get("/organizations/:org/credentials", s.listOrganizationCredentials)
	r.Put("/organizations/:org/credentials/:provider", s.putOrganizationCredential)
	r.Delete("/organizations/:org/credentials/:provider", s.deleteOrganizationCredential)
	r.Get("/projects/:project/credentials", s.listProjectCredentials)
	r.Put("/projects/:project/credentials/:provider", s.putProjectCredential)
	r.Delete("/projects/:project/credentials/:provider", s.deleteProjectCredential)
}

// putCredentialRequest is the body of PUT …/credentials/{provider}.
type putCredentialRequest struct {
	APIKey  string `json:"api_key"`
	BaseURL string `json:"base_url"`
}

// credentialView is a credential as replies show it: the key only by its
// fingerprint.
type credentialView struct {
	Provider     string    `json:"provider"`
	Scope        string    `json:"scope"`
	Organization string    `json:"organization"`
	Project      string    `json:"project,omitempty"`
	Fingerprint  string    `json:"fingerprint"`
	BaseURL      *string   `json:"base_url"`
	UpdatedBy    string    `json:"updated_by"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// scopeRef is where a credential or limits route acts: an organization, or
// a project of it.
type scopeRef struct {
	orgID, orgKey         string
	projectID, projectKey string
}

// describe names the target, e.g. "project WEB".
func (t scopeRef) describe() string {
	if t.projectID != "" {
		return "project " + t.projectKey
	}
	return "organization " + t.orgKey
}

func (t scopeRef) view(c store.Credential) credentialView {
	v := credentialView{Provider: c.Provider, Scope: scopeOrganization, Organization: t.orgKey,
		Fingerprint: c.Fingerprint, UpdatedBy: c.CreatedBy, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
	if c.ProjectID != "" {
		v.Scope, v.Project = scopeProject, t.projectKey
	}
	if c.BaseURL != "" {
		v.BaseURL = &c.BaseURL
	}
	return v
}

// organizationTarget resolves {org} and checks perm on the organization.
func (s *Server) organizationTarget(c *fiber.Ctx, perm store.Permission) (scopeRef, error) {
	o, err := s.pathOrganization(c)
	if err != nil {
		return scopeRef{}, err
	}
	if err := principal(c).Authorize(perm, o.ID, ""); err != nil {
		return scopeRef{}, err
	}
	return scopeRef{orgID: o.ID, orgKey: o.Key}, nil
}

// projectTarget resolves {project} and checks perm on the project.
func (s *Server) projectTarget(c *fiber.Ctx, perm store.Permission) (scopeRef, error) {
	p, err := s.pathProject(c, perm)
	if err != nil {
		return scopeRef{}, err
	}
	o, err := s.db.OrganizationByKey(c.UserContext(), p.OrganizationID)
	if err != nil {
		return scopeRef{}, err
	}
	return scopeRef{orgID: o.ID, orgKey: o.Key, projectID: p.ID, projectKey: p.Key}, nil
}

// pathProvider reads {provider}: anthropic or openai.
func pathProvider(c *fiber.Ctx) (string, error) {
	p := c.Params("provider")
	if !store.ValidProvider(p) {
		return "", store.Errorf(store.CodeInvalid, "provider: must be %s or %s, got %q",
			store.ProviderAnthropic, store.ProviderOpenAI, p)
	}
	return p, nil
}

func (s *Server) listOrganizationCredentials(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.listCredentials(c, t)
}

func (s *Server) listProjectCredentials(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.listCredentials(c, t)
}

// listCredentials lists the credentials stored at the target's scope and,
// for a project, the organization's defaults it falls back to.
func (s *Server) listCredentials(c *fiber.Ctx, t scopeRef) error {
	ctx := c.UserContext()
	items := []credentialView{}
	if t.projectID != "" {
		own, err := s.db.ListCredentials(ctx, t.orgID, t.projectID)
		if err != nil {
			return err
		}
		for _, cr := range own {
			items = append(items, t.view(cr))
		}
	}
	defaults, err := s.db.ListCredentials(ctx, t.orgID, "")
	if err != nil {
		return err
	}
	for _, cr := range defaults {
		items = append(items, t.view(cr))
	}
	return c.JSON(fiber.Map{"items": items})
}

func (s *Server) putOrganizationCredential(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.putCredential(c, t)
}

func (s *Server) putProjectCredential(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.putCredential(c, t)
}

// putCredential seals the key and creates or replaces the credential of
// the provider at the target's scope. The plaintext key goes nowhere but
// into the sealer.
func (s *Server) putCredential(c *fiber.Ctx, t scopeRef) error {
	provider, err := pathProvider(c)
	if err != nil {
		return err
	}
	if sealerMissing(s.sealer) {
		s.log.WarnContext(c.UserContext(), "credential refused: no credentials key configured",
			slog.String("organization", t.orgKey), slog.String("provider", provider))
		return store.Errorf(store.CodeInternal, "credentials cannot be stored: this server has no "+
			"gateway.credentials_key (or gateway.credentials_key_file) configured to encrypt them")
	}
	var req putCredentialRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if err := validateAPIKey(req.APIKey); err != nil {
		return err
	}
	baseURL, err := validateBaseURL(req.BaseURL)
	if err != nil {
		return err
	}
	if baseURL != "" && s.upstreams != nil {
		if err := s.upstreams.CheckUpstream(baseURL); err != nil {
			return store.Errorf(store.CodeInvalid, "base_url: %v; %s", err, upstreamRule)
		}
	}
	sealed := s.sealer.SealCredential(t.orgID, t.projectID, provider, req.APIKey, baseURL, principal(c).Subject)
	out, err := s.db.PutCredential(c.UserContext(), sealed)
	if err != nil {
		return err
	}
	return c.JSON(t.view(out))
}

func (s *Server) deleteOrganizationCredential(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.deleteCredential(c, t)
}

func (s *Server) deleteProjectCredential(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.deleteCredential(c, t)
}

func (s *Server) deleteCredential(c *fiber.Ctx, t scopeRef) error {
	provider, err := pathProvider(c)
	if err != nil {
		return err
	}
	if err := s.db.DeleteCredential(c.UserContext(), t.orgID, t.projectID, provider); err != nil {
		if store.IsCode(err, store.CodeNotFound) {
			return store.Errorf(store.CodeNotFound, "no %s credential is stored for %s", provider, t.describe())
		}
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// sealerMissing reports whether no sealer is configured, a typed nil
// pointer included.
func sealerMissing(s CredentialSealer) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// validateAPIKey refuses an empty or oversized key, or one with whitespace
// or control characters (a pasted newline would otherwise fail every call).
// The message never repeats the key.
func validateAPIKey(k string) error {
	switch {
	case k == "":
		return store.Errorf(store.CodeInvalid, "api_key: required")
	case len(k) > maxAPIKeyLen:
		return store.Errorf(store.CodeInvalid, "api_key: at most %d bytes", maxAPIKeyLen)
	case strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return store.Errorf(store.CodeInvalid, "api_key: must not contain whitespace or control characters")
	}
	return nil
}

// validateBaseURL accepts "" (the provider's default) or an absolute http
// or https URL without credentials, query or fragment, and returns it
// normalised (lower-case scheme).
func validateBaseURL(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	if len(raw) > maxBaseURLLen {
		return "", store.Errorf(store.CodeInvalid, "base_url: at most %d characters", maxBaseURLLen)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil, u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return "", store.Errorf(store.CodeInvalid, "base_url: must be an absolute http:// or https:// URL")
	case u.User != nil:
		return "", store.Errorf(store.CodeInvalid, "base_url: must not carry a user or password; put the key in api_key")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", store.Errorf(store.CodeInvalid, "base_url: must not have a query or fragment")
	}
	return u.String(), nil
}
