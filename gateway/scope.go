package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/ttlcache"
	"github.com/balletplanner/ballet/store"
)

// scopeSource loads what a call needs about its project. *store.DB
// provides it, through the Store given to New.
type scopeSource interface {
	ResolveLLMScope(ctx context.Context, organizationID, projectID string) (store.LLMScope, error)
}

// upstreamCred is a decrypted credential ready to use.
type upstreamCred struct {
	provider string
	apiKey   string
	baseURL  string
	project  bool // a project override, not the organization default
}

// scope is a project's resolved scope: labels, credentials, limits.
type scope struct {
	store.LLMScope
	creds   []upstreamCred // the project's overrides first
	openErr error          // a credential that could not be opened
}

// name says which scope a limit belongs to, for messages.
func (s *scope) name() string {
	if s.ProjectKey != "" {
		return "project " + s.ProjectKey
	}
	return "organization " + s.OrganizationKey
}

// allowModel refuses, 403 naming it, a model the scope's model allow-lists
// leave out.
func (s *scope) allowModel(model string) *refusal {
	if s.Models.Allows(model) {
		return nil
	}
	where := s.name()
	if len(s.Models.Organization) > 0 && !slices.Contains(s.Models.Organization, model) {
		where = "organization " + s.OrganizationKey
	}
	return &refusal{status: http.StatusForbidden, typ: llm.ErrPermission, code: "model_not_allowed",
		msg: "model " + strconv.Quote(model) + " is not allowed for " + s.name() + ": the model allow-list of " + where +
			" leaves it out; GET /v1/models lists the models it may use"}
}

// id keys the scope's counters in Redis.
func (s *scope) id() string {
	if s.ProjectID != "" {
		return s.ProjectID
	}
	return s.OrganizationID
}

// credential picks the credential of a call: the project's overrides win
// over the organization's defaults; within one scope the provider that
// fits the model does (claude-* → anthropic, anything else → openai).
func (s *scope) credential(model string) (upstreamCred, bool) {
	prefer := store.ProviderOpenAI
	if strings.HasPrefix(model, "claude") {
		prefer = store.ProviderAnthropic
	}
	for _, project := range []bool{true, false} {
		first := -1
		for i, c := range s.creds {
			if c.project != project {
				continue
			}
			if c.provider == prefer {
				return c, true
			}
			if first < 0 {
				first = i
			}
		}
		if first >= 0 {
			return s.creds[first], true
		}
	}
	return upstreamCred{}, false
}

// maxCachedScopes bounds the scopes kept.
const maxCachedScopes = 10000

// scopeCache caches resolved scopes for ttl (none when ttl is not
// positive), so a stream of calls does not read Postgres each time.
// Concurrent misses of one scope share one lookup.
type scopeCache struct {
	src    scopeSource
	sealer *Sealer
	ttl    time.Duration
	now    func() time.Time
	cache  *ttlcache.Cache[*scope]
}

// newScopeCache is an empty scopeCache reading the time from now
// (time.Now when nil).
func newScopeCache(src scopeSource, sealer *Sealer, ttl time.Duration, now func() time.Time) *scopeCache {
	if now == nil {
		now = time.Now
	}
	return &scopeCache{src: src, sealer: sealer, ttl: ttl, now: now, cache: ttlcache.New[*scope](maxCachedScopes, now)}
}

// get returns the scope of a project, from the cache while it is fresh.
// A miss joins the lookup of its key already running, if any; each caller
// waits for it only as long as its own ctx lasts, and the lookup itself is
// not cut short by one caller leaving.
func (c *scopeCache) get(ctx context.Context, organizationID, projectID string) (*scope, error) {
	now := c.now()
	s, err := c.cache.Load(ctx, organizationID+"/"+projectID, func(ctx context.Context) (*scope, time.Time, error) {
		s, err := c.load(ctx, organizationID, projectID)
		return s, now.Add(c.ttl), err
	})
	if err != nil && err == ctx.Err() {
		return nil, fmt.Errorf("gateway: resolve scope: %w", err)
	}
	return s, err
}

// load reads a scope from its source and opens its credentials.
func (c *scopeCache) load(ctx context.Context, organizationID, projectID string) (*scope, error) {
	ls, err := c.src.ResolveLLMScope(ctx, organizationID, projectID)
	if err != nil {
		return nil, fmt.Errorf("gateway: resolve scope: %w", err)
	}
	s := &scope{LLMScope: ls}
	for _, cr := range ls.Credentials {
		if c.sealer == nil {
			s.openErr = ErrNoCredentialsKey
			continue
		}
		apiKey, err := c.sealer.OpenCredential(cr)
		if err != nil {
			s.openErr = err
			continue
		}
		s.creds = append(s.creds, upstreamCred{provider: cr.Provider, apiKey: apiKey, baseURL: cr.BaseURL, project: cr.ProjectID != ""})
	}
	return s, nil
}

// credentialOf is the scope's credential of provider: the project's
// override, else the organization's default.
func (s *scope) credentialOf(provider string) (upstreamCred, bool) {
	for _, project := range []bool{true, false} {
		for _, c := range s.creds {
			if c.project == project && c.provider == provider {
				return c, true
			}
		}
	}
	return upstreamCred{}, false
}
