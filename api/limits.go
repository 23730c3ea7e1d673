package api

import (
	"math"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerLimits registers the gateway's budgets and rate limits (ours):
// an organization's defaults and a project's overrides.
func (s *Server) registerLimits(r fiber.Router) {
	r.Get("/organizations/:org/limits", s.getOrganizationLimits)
	r.Put("/organizations/:org/limits", s.putOrganizationLimits)
	r.Delete("/organizations/:org/limits", s.deleteOrganizationLimits)
	r.Get("/projects/:project/limits", s.getProjectLimits)
	r.Put("/projects/:project/limits", s.putProjectLimits)
	r.Delete("/projects/:project/limits", s.deleteProjectLimits)
}

// limitsRequest is the body of PUT …/limits. It replaces what the scope
// stores: an absent or null field is no limit at the scope (for a project:
// the organization's value applies).
type limitsRequest struct {
	TokenBudget *int64 `json:"token_budget"`
	// Budget is the budget in BudgetUnit (tokens, or micro_usd: millionths
	// of a US dollar); token_budget is the same in tokens. Set at most one.
	Budget            *int64  `json:"budget"`
	BudgetUnit        *string `json:"budget_unit"`
	BudgetPeriod      *string `json:"budget_period"`
	RequestsPerMinute *int64  `json:"requests_per_minute"`
	TokensPerMinute   *int64  `json:"tokens_per_minute"`
}

// limitValues are the limit fields; null is no limit. Budget is in
// BudgetUnit; TokenBudget repeats it when the unit is tokens.
type limitValues struct {
	TokenBudget       *int64 `json:"token_budget"`
	Budget            *int64 `json:"budget"`
	BudgetUnit        string `json:"budget_unit"`
	BudgetPeriod      string `json:"budget_period"`
	RequestsPerMinute *int64 `json:"requests_per_minute"`
	TokensPerMinute   *int64 `json:"tokens_per_minute"`
}

// limitsView is the reply of the limits routes: what the scope stores
// (all null when nothing is), and the limits in force there, a project's
// merged field by field over its organization's.
type limitsView struct {
	Scope        string `json:"scope"`
	Organization string `json:"organization"`
	Project      string `json:"project,omitempty"`
	limitValues
	UpdatedBy *string     `json:"updated_by"`
	UpdatedAt *time.Time  `json:"updated_at"`
	Effective limitValues `json:"effective"`
}

func values(l store.Limits) limitValues {
	period := l.BudgetPeriod
	if period == "" {
		period = store.BudgetMonth
	}
	v := limitValues{Budget: l.TokenBudget, BudgetUnit: l.BudgetUnit, BudgetPeriod: period,
		RequestsPerMinute: l.RequestsPerMinute, TokensPerMinute: l.TokensPerMinute}
	if v.BudgetUnit == "" {
		v.BudgetUnit = store.BudgetTokens
	}
	if v.BudgetUnit == store.BudgetTokens {
		v.TokenBudget = l.TokenBudget
	}
	return v
}

func (s *Server) getOrganizationLimits(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).AuthorizeInOrganization(store.PermOrganizationRead, o.ID); err != nil {
		return err
	}
	return s.replyLimits(c, scopeRef{orgID: o.ID, orgKey: o.Key})
}

func (s *Server) getProjectLimits(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermProjectRead)
	if err != nil {
		return err
	}
	return s.replyLimits(c, t)
}

func (s *Server) putOrganizationLimits(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.putLimits(c, t)
}

func (s *Server) putProjectLimits(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.putLimits(c, t)
}

func (s *Server) deleteOrganizationLimits(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.deleteLimits(c, t)
}

func (s *Server) deleteProjectLimits(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.deleteLimits(c, t)
}

func (s *Server) putLimits(c *fiber.Ctx, t scopeRef) error {
	var req limitsRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	l := store.Limits{OrganizationID: t.orgID, ProjectID: t.projectID, TokenBudget: req.TokenBudget,
		BudgetPeriod: store.BudgetMonth, BudgetUnit: store.BudgetTokens, RequestsPerMinute: req.RequestsPerMinute,
		TokensPerMinute: req.TokensPerMinute, UpdatedBy: principal(c).Subject}
	if req.BudgetUnit != nil {
		switch u := *req.BudgetUnit; u {
		case store.BudgetTokens, store.BudgetMicroUSD:
			l.BudgetUnit = u
		default:
			return store.Errorf(store.CodeInvalid, "budget_unit: must be tokens or micro_usd, got %q", u)
		}
	}
	switch {
	case req.Budget != nil && req.TokenBudget != nil:
		return store.Errorf(store.CodeInvalid, "budget and token_budget: set at most one (token_budget is budget in tokens)")
	case req.TokenBudget != nil && l.BudgetUnit != store.BudgetTokens:
		return store.Errorf(store.CodeInvalid, "token_budget: counts tokens, but budget_unit is %s: set budget instead", l.BudgetUnit)
	case req.Budget != nil:
		l.TokenBudget = req.Budget
	}
	if req.BudgetPeriod != nil {
		switch p := *req.BudgetPeriod; p {
		case store.BudgetDay, store.BudgetWeek, store.BudgetMonth:
			l.BudgetPeriod = p
		default:
			return store.Errorf(store.CodeInvalid, "budget_period: must be day, week or month, got %q", p)
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
		max  int64
	}{
		{"token_budget", req.TokenBudget, math.MaxInt64},
		{"budget", req.Budget, math.MaxInt64},
		{"requests_per_minute", req.RequestsPerMinute, math.MaxInt32},
		{"tokens_per_minute", req.TokensPerMinute, math.MaxInt64},
	} {
		if f.v != nil && (*f.v < 0 || *f.v > f.max) {
			return store.Errorf(store.CodeInvalid, "%s: must be 0-%d or null (no limit), got %d", f.name, f.max, *f.v)
		}
	}
	if _, err := s.db.PutLimits(c.UserContext(), l); err != nil {
		return err
	}
	return s.replyLimits(c, t)
}

func (s *Server) deleteLimits(c *fiber.Ctx, t scopeRef) error {
	if err := s.db.DeleteLimits(c.UserContext(), t.orgID, t.projectID); err != nil {
		if store.IsCode(err, store.CodeNotFound) {
			return store.Errorf(store.CodeNotFound, "no limits are stored for %s", t.describe())
		}
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// replyLimits answers the limits stored at the target's scope and those in
// force there.
func (s *Server) replyLimits(c *fiber.Ctx, t scopeRef) error {
	ctx := c.UserContext()
	v := limitsView{Scope: scopeOrganization, Organization: t.orgKey,
		limitValues: limitValues{BudgetPeriod: store.BudgetMonth, BudgetUnit: store.BudgetTokens}}
	if t.projectID != "" {
		v.Scope, v.Project = scopeProject, t.projectKey
	}
	stored, err := s.db.GetLimits(ctx, t.orgID, t.projectID)
	switch {
	case err == nil:
		v.limitValues = values(stored)
		v.UpdatedBy, v.UpdatedAt = &stored.UpdatedBy, &stored.UpdatedAt
	case !store.IsCode(err, store.CodeNotFound):
		return err
	}
	eff, err := s.db.EffectiveLimits(ctx, t.orgID, t.projectID)
	if err != nil {
		return err
	}
	v.Effective = values(eff)
	return c.JSON(v)
}
