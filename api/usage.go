package api

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// defaultUsageWindow is how far back a usage report reaches without since.
const defaultUsageWindow = 30 * 24 * time.Hour

// registerUsage registers the project usage report (SPEC §9).
func (s *Server) registerUsage(r fiber.Router) {
	r.Get("/projects/:project/usage", s.projectUsage)
	r.Get("/organizations/:org/usage", s.organizationUsage)
}

// usageReport is the reply of GET /projects/{project}/usage: one entry per
// group, in key order, and their sum.
type usageReport struct {
	Project      string             `json:"project,omitempty"`
	Organization string             `json:"organization,omitempty"`
	GroupBy      store.UsageGroup   `json:"group_by"`
	Since        time.Time          `json:"since"`
	Items        []store.UsageTotal `json:"items"`
	Total        usageTotal         `json:"total"`
}

// usageTotal is the sum of a report's groups.
type usageTotal struct {
	Requests         int64 `json:"requests"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	Estimated        int64 `json:"estimated"`
	// CostMicroUSD sums the priced requests' cost in micro-USD; Unpriced
	// counts the requests without a cost.
	CostMicroUSD int64 `json:"cost_micro_usd"`
	Unpriced     int64 `json:"unpriced"`
}

// projectUsage is GET /projects/{project}/usage?group_by=model|session|day&since=
// (project.read). Planner calls group by session as planner:<session>.
func (s *Server) projectUsage(c *fiber.Ctx) error {
	p, err := s.pathProject(c, store.PermProjectRead)
	if err != nil {
		return err
	}
	group := store.UsageGroup(c.Query("group_by", string(store.UsageByModel)))
	if !group.Valid() {
		return store.Errorf(store.CodeInvalid, "group_by: must be model, session or day, got %q", string(group))
	}
	since, err := parseSince(c.Query("since"), time.Now())
	if err != nil {
		return err
	}
	items, err := s.db.UsageReport(c.UserContext(), p.ID, group, since)
	if err != nil {
		return err
	}
	return c.JSON(sumUsage(usageReport{Project: p.Key, GroupBy: group, Since: since, Items: items}))
}

// organizationUsage is GET /organizations/{org}/usage?group_by=project|model|day&since=
// (organization.read): its projects' calls and its own, the latter under
// the project key "".
func (s *Server) organizationUsage(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).AuthorizeInOrganization(store.PermOrganizationRead, o.ID); err != nil {
		return err
	}
	group := store.UsageGroup(c.Query("group_by", string(store.UsageByProject)))
	if !group.ValidForOrganization() {
		return store.Errorf(store.CodeInvalid, "group_by: must be project, model or day, got %q", string(group))
	}
	since, err := parseSince(c.Query("since"), time.Now())
	if err != nil {
		return err
	}
	items, err := s.db.OrganizationUsageReport(c.UserContext(), o.ID, group, since)
	if err != nil {
		return err
	}
	return c.JSON(sumUsage(usageReport{Organization: o.Key, GroupBy: group, Since: since, Items: items}))
}

// sumUsage fills a report's total from its items.
func sumUsage(rep usageReport) usageReport {
	for _, t := range rep.Items {
		rep.Total.Requests += t.Requests
		rep.Total.InputTokens += t.InputTokens
		rep.Total.OutputTokens += t.OutputTokens
		rep.Total.CacheReadTokens += t.CacheReadTokens
		rep.Total.CacheWriteTokens += t.CacheWriteTokens
		rep.Total.Estimated += t.Estimated
		rep.Total.CostMicroUSD += t.CostMicroUSD
		rep.Total.Unpriced += t.Unpriced
	}
	return rep
}

// parseSince reads the since parameter: an RFC 3339 time, or a date
// (YYYY-MM-DD, midnight UTC); empty means 30 days before now.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return now.Add(-defaultUsageWindow).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	// An unescaped "+" of an offset arrives as a space.
	if t, err := time.Parse(time.RFC3339Nano, strings.Replace(v, " ", "+", 1)); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, store.Errorf(store.CodeInvalid,
		"since: must be an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02), got %q", v)
}
