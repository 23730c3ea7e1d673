package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

func TestUsageREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now().UTC()
	day := func(d int) time.Time { return now.AddDate(0, 0, -d) }
	rows := []store.Usage{
		{RequestID: "r1", Caller: "planner:s1", Model: "claude-a", InputTokens: 100, OutputTokens: 10, CreatedAt: day(1)},
		{RequestID: "r2", Caller: "planner:s1", Model: "claude-a", InputTokens: 200, OutputTokens: 20, CacheReadTokens: 50, CreatedAt: day(2)},
		{RequestID: "r3", Caller: "planner:s2", Model: "gpt-b", InputTokens: 7, OutputTokens: 3, CacheWriteTokens: 4, Estimated: true, CreatedAt: day(2)},
		{RequestID: "r4", Caller: "admin@example.com", Model: "claude-a", InputTokens: 1, OutputTokens: 1, CreatedAt: day(40)},
	}
	for i := range rows {
		rows[i].OrganizationID, rows[i].ProjectID, rows[i].Provider, rows[i].Status = e.org.ID, e.project.ID, "anthropic", 200
	}
	// Another organization's project: never counted.
	rows = append(rows, store.Usage{RequestID: "x1", OrganizationID: e.otherOrg.ID, ProjectID: e.otherProject.ID,
		Caller: "planner:s9", Provider: "openai", Model: "claude-a", Status: 200, InputTokens: 999, CreatedAt: day(1)})
	if _, err := e.db.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/projects/WEB/usage"
	tests := []struct {
		name    string
		query   string
		who     string
		status  int
		want    string // key:requests:input:output:cache_read:cache_write:estimated, …
		total   string
		message string
	}{
		{"default by model, 30 days", "", "viewer", 200, "claude-a:2:300:30:50:0:0 gpt-b:1:7:3:0:4:1", "3:307:33:50:4:1", ""},
		{"by session", "?group_by=session", "engineer", 200, "planner:s1:2:300:30:50:0:0 planner:s2:1:7:3:0:4:1", "3:307:33:50:4:1", ""},
		{"by day", "?group_by=day", "approver", 200,
			fmt.Sprintf("%s:2:207:23:50:4:1 %s:1:100:10:0:0:0", day(2).Format(time.DateOnly), day(1).Format(time.DateOnly)), "3:307:33:50:4:1", ""},
		{"since a date", "?group_by=model&since=" + day(60).Format(time.DateOnly), "admin", 200, "claude-a:3:301:31:50:0:0 gpt-b:1:7:3:0:4:1", "4:308:34:50:4:1", ""},
		{"since RFC 3339", "?since=" + day(1).Add(-time.Minute).Format(time.RFC3339), "admin", 200, "claude-a:1:100:10:0:0:0", "1:100:10:0:0:0", ""},
		{"since with an unescaped offset", "?group_by=session&since=" + day(1).Add(-time.Minute).In(time.FixedZone("", 2*3600)).Format(time.RFC3339), "admin", 200,
			"planner:s1:1:100:10:0:0:0", "1:100:10:0:0:0", ""},
		{"since in the future", "?since=" + now.AddDate(1, 0, 0).Format(time.DateOnly), "platform", 200, "", "0:0:0:0:0:0", ""},
		{"bad group_by", "?group_by=user", "admin", 400, "", "", `group_by: must be model, session or day, got "user"`},
		{"bad since", "?since=yesterday", "admin", 400, "", "", `since: must be an RFC 3339 time`},
		{"bad since date", "?since=2026-13-01", "admin", 400, "", "", "since"},
		{"no token", "", "", 401, "", "", "bearer"},
		{"outsider", "", "outsider", 404, "", "", `project "WEB" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", base+tt.query, tt.who, nil).expect(t, tt.status)
			if tt.status != 200 {
				if !strings.Contains(r.message(), tt.message) {
					t.Errorf("message %q does not contain %q", r.message(), tt.message)
				}
				return
			}
			var got []string
			items, _ := r.Body["items"].([]any)
			for _, it := range items {
				got = append(got, usageLine(it.(map[string]any), true))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("items %q, want %q", g, tt.want)
			}
			if g := usageLine(r.Body["total"].(map[string]any), false); g != tt.total {
				t.Errorf("total %q, want %q", g, tt.total)
			}
			if r.Body["project"] != "WEB" || r.Body["group_by"] == "" || r.Body["since"] == "" {
				t.Errorf("reply %s", r.Raw)
			}
		})
	}
	// The default window starts 30 days ago.
	r := e.do("GET", base, "admin", nil).expect(t, 200)
	since, err := time.Parse(time.RFC3339Nano, r.Body["since"].(string))
	if err != nil || since.Before(now.AddDate(0, 0, -30).Add(-time.Minute)) || since.After(now.AddDate(0, 0, -30).Add(time.Minute)) {
		t.Errorf("default since %v (%v)", r.Body["since"], err)
	}
	if r.Body["group_by"] != "model" {
		t.Errorf("default group_by %v", r.Body["group_by"])
	}
}

func usageLine(m map[string]any, withKey bool) string {
	var parts []string
	if withKey {
		parts = append(parts, fmt.Sprint(m["key"]))
	}
	for _, k := range []string{"requests", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "estimated"} {
		parts = append(parts, fmt.Sprint(m[k]))
	}
	return strings.Join(parts, ":")
}

// TestUsageCostREST reports cost by project, model and day: an
// organization's report sums its projects' calls and its own, priced rows
// sum their cost and the others count as unpriced.
func TestUsageCostREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now().UTC()
	cost := func(v int64) *int64 { return &v }
	rows := []store.Usage{
		{RequestID: "c1", ProjectID: e.project.ID, Model: "claude-a", InputTokens: 10, CostMicroUSD: cost(1500), CreatedAt: now.AddDate(0, 0, -1)},
		{RequestID: "c2", ProjectID: e.project.ID, Model: "claude-a", InputTokens: 10, CostMicroUSD: cost(2500), CreatedAt: now},
		{RequestID: "c3", ProjectID: e.project.ID, Model: "gpt-b", InputTokens: 10, CreatedAt: now},  // no price
		{RequestID: "c4", Model: "claude-a", InputTokens: 10, CostMicroUSD: cost(7), CreatedAt: now}, // the organization's own
	}
	for i := range rows {
		rows[i].OrganizationID, rows[i].Caller, rows[i].Provider, rows[i].Status = e.org.ID, "planner:s1", "anthropic", 200
	}
	rows = append(rows, store.Usage{RequestID: "x1", OrganizationID: e.otherOrg.ID, ProjectID: e.otherProject.ID,
		Caller: "planner:s9", Provider: "openai", Model: "claude-a", Status: 200, CostMicroUSD: cost(999), CreatedAt: now})
	if _, err := e.db.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	costLine := func(m map[string]any, withKey bool) string {
		s := fmt.Sprintf("%v:%v:%v", m["requests"], m["cost_micro_usd"], m["unpriced"])
		if withKey {
			s = fmt.Sprint(m["key"]) + "=" + s
		}
		return s
	}
	tests := []struct {
		name, path, who string
		status          int
		want, total     string // key=requests:cost:unpriced, …
		message         string
	}{
		{"project by model", "/api/v1/projects/WEB/usage?group_by=model", "viewer", 200, "claude-a=2:4000:0 gpt-b=1:0:1", "3:4000:1", ""},
		{"organization by project", "/api/v1/organizations/acme/usage", "viewer", 200, "=1:7:0 WEB=3:4000:1", "4:4007:1", ""},
		{"organization by model", "/api/v1/organizations/acme/usage?group_by=model", "viewer", 200, "claude-a=3:4007:0 gpt-b=1:0:1", "4:4007:1", ""},
		{"organization by day", "/api/v1/organizations/acme/usage?group_by=day", "viewer", 200,
			fmt.Sprintf("%s=1:1500:0 %s=3:2507:1", now.AddDate(0, 0, -1).Format(time.DateOnly), now.Format(time.DateOnly)), "4:4007:1", ""},
		{"organization by session", "/api/v1/organizations/acme/usage?group_by=session", "viewer", 400, "", "", `group_by: must be project, model or day, got "session"`},
		{"organization bad since", "/api/v1/organizations/acme/usage?since=soon", "viewer", 400, "", "", "since: must be an RFC 3339 time"},
		{"outsider", "/api/v1/organizations/acme/usage", "outsider", 404, "", "", "acme"},
		{"no token", "/api/v1/organizations/acme/usage", "", 401, "", "", "bearer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", tt.path, tt.who, nil).expect(t, tt.status)
			if tt.status != 200 {
				if !strings.Contains(r.message(), tt.message) {
					t.Errorf("message %q does not contain %q", r.message(), tt.message)
				}
				return
			}
			var got []string
			items, _ := r.Body["items"].([]any)
			for _, it := range items {
				got = append(got, costLine(it.(map[string]any), true))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("items %q, want %q", g, tt.want)
			}
			if g := costLine(r.Body["total"].(map[string]any), false); g != tt.total {
				t.Errorf("total %q, want %q", g, tt.total)
			}
		})
	}
}
