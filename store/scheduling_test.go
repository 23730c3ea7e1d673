package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// schedCallers are the callers of the scheduling tests over tenants():
// platform-admin, organization-admin of acme, engineer and viewer of WEB,
// organization-admin of globex.
func schedCallers(acme, globex store.Organization, web store.Project) map[string]store.Caller {
	as := func(subject string, role store.Role, scope store.Scope) store.Caller {
		return store.HumanCaller(&store.Principal{Subject: subject, Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: subject, Role: role, Scope: scope}}})
	}
	projectScope := store.Scope{Kind: store.ScopeProject, OrganizationID: acme.ID, ProjectID: web.ID}
	return map[string]store.Caller{
		"platform": as("platform@example.com", store.RolePlatformAdmin, store.Scope{Kind: store.ScopePlatform}),
		"admin":    as("admin@example.com", store.RoleOrganizationAdmin, store.Scope{Kind: store.ScopeOrganization, OrganizationID: acme.ID}),
		"engineer": as("engineer@example.com", store.RoleEngineer, projectScope),
		"viewer":   as("viewer@example.com", store.RoleViewer, projectScope),
		"outsider": as("outsider@example.com", store.RoleOrganizationAdmin, store.Scope{Kind: store.ScopeOrganization, OrganizationID: globex.ID}),
	}
}

func schedInt(n int) *int { return &n }

func TestSchedulingPermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, globex, web, _, _ := tenants(t, db)
	callers := schedCallers(acme, globex, web)
	set := store.SchedulingSettings{Weight: 3, MaxRunningTurns: schedInt(4)}
	tests := []struct {
		name, who, op, key string
		want               store.Code // "" is allowed
	}{
		{"platform admin reads an organization", "platform", "get-org", "acme", ""},
		{"organization admin reads its organization", "admin", "get-org", "acme", ""},
		{"project engineer reads its organization", "engineer", "get-org", "acme", ""},
		{"another organization's admin", "outsider", "get-org", "acme", store.CodeNotFound},
		{"no such organization", "platform", "get-org", "nope", store.CodeNotFound},
		{"platform admin sets an organization's weight", "platform", "set-org", "acme", ""},
		{"organization admin may not", "admin", "set-org", "acme", store.CodeForbidden},
		{"engineer may not", "engineer", "set-org", "acme", store.CodeForbidden},
		{"another organization's admin sets acme", "outsider", "set-org", "acme", store.CodeNotFound},
		{"engineer reads a project", "engineer", "get-project", "WEB", ""},
		{"another organization's project", "admin", "get-project", "GLX", store.CodeNotFound},
		{"organization admin sets a project's weight", "admin", "set-project", "WEB", ""},
		{"platform admin sets a project's weight", "platform", "set-project", "GLX", ""},
		{"engineer may not set a project's", "engineer", "set-project", "WEB", store.CodeForbidden},
		{"viewer may not set a project's", "viewer", "set-project", "WEB", store.CodeForbidden},
		{"organization admin sets another organization's project", "admin", "set-project", "GLX", store.CodeNotFound},
		{"no such project", "platform", "set-project", "NOPE", store.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caller := callers[tt.who]
			var got store.SchedulingSettings
			var err error
			switch tt.op {
			case "get-org":
				got, err = db.OrganizationScheduling(ctx, caller, tt.key)
			case "set-org":
				got, err = db.SetOrganizationScheduling(ctx, caller, tt.key, set)
			case "get-project":
				got, err = db.ProjectScheduling(ctx, caller, tt.key)
			case "set-project":
				got, err = db.SetProjectScheduling(ctx, caller, tt.key, set)
			}
			if tt.want != "" {
				if !store.IsCode(err, tt.want) {
					t.Fatalf("err = %v, want %s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tt.op, "set") && (got.Weight != 3 || got.MaxRunningTurns == nil || *got.MaxRunningTurns != 4 ||
				got.MaxRunningTurnsPerHuman != nil || got.MaxQueuedTurns != nil) {
				t.Errorf("stored %+v", got)
			}
			if !strings.HasPrefix(tt.op, "set") && got.Weight < 1 {
				t.Errorf("read %+v", got)
			}
		})
	}
}

func TestSchedulingValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, globex, web, _, _ := tenants(t, db)
	platform := schedCallers(acme, globex, web)["platform"]
	base := store.SchedulingSettings{Weight: 7, MaxRunningTurns: schedInt(2), MaxRunningTurnsPerHuman: schedInt(1)}
	orgBase := base
	orgBase.MaxQueuedTurns = schedInt(50)
	if _, err := db.SetOrganizationScheduling(ctx, platform, "acme", orgBase); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetProjectScheduling(ctx, platform, "WEB", base); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*store.SchedulingSettings)) store.SchedulingSettings {
		s := base
		f(&s)
		return s
	}
	tests := []struct {
		name    string
		project bool
		s       store.SchedulingSettings
		field   string
	}{
		{"weight 0", false, with(func(s *store.SchedulingSettings) { s.Weight = 0 }), "weight"},
		{"weight 1001", false, with(func(s *store.SchedulingSettings) { s.Weight = 1001 }), "weight"},
		{"negative weight of a project", true, with(func(s *store.SchedulingSettings) { s.Weight = -1 }), "weight"},
		{"negative cap", false, with(func(s *store.SchedulingSettings) { s.MaxRunningTurns = schedInt(-1) }), "max_running_turns"},
		{"cap over 100000", true, with(func(s *store.SchedulingSettings) { s.MaxRunningTurns = schedInt(100001) }), "max_running_turns"},
		{"negative per-human cap", false, with(func(s *store.SchedulingSettings) { s.MaxRunningTurnsPerHuman = schedInt(-2) }), "max_running_turns_per_human"},
		{"queued cap over 100000", false, with(func(s *store.SchedulingSettings) { s.MaxQueuedTurns = schedInt(100001) }), "max_queued_turns"},
		{"a project's queued cap", true, with(func(s *store.SchedulingSettings) { s.MaxQueuedTurns = schedInt(10) }), "max_queued_turns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.project {
				_, err = db.SetProjectScheduling(ctx, platform, "WEB", tt.s)
			} else {
				_, err = db.SetOrganizationScheduling(ctx, platform, "acme", tt.s)
			}
			if !store.IsCode(err, store.CodeInvalid) || !strings.Contains(err.Error(), tt.field+": ") {
				t.Fatalf("err = %v, want invalid_argument naming %s", err, tt.field)
			}
		})
	}
	// Nothing was written.
	org, err := db.OrganizationScheduling(ctx, platform, "acme")
	if err != nil {
		t.Fatal(err)
	}
	proj, err := db.ProjectScheduling(ctx, platform, "WEB")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := schedJSON(t, org), schedJSON(t, orgBase); a != b {
		t.Errorf("organization %s, want %s", a, b)
	}
	if a, b := schedJSON(t, proj), schedJSON(t, base); a != b {
		t.Errorf("project %s, want %s", a, b)
	}
}

func schedJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSchedulingNotifies: a change of weights or caps notifies the
// dispatcher's channel with {"k":"w"} at commit; a refused one does not.
func TestSchedulingNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, globex, web, _, _ := tenants(t, db)
	callers := schedCallers(acme, globex, web)
	conn, err := pgx.ConnectConfig(ctx, db.Pool().Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "LISTEN "+store.DispatchChannel); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		set    func() error
		notify bool
	}{
		{"refused organization change", func() error {
			_, err := db.SetOrganizationScheduling(ctx, callers["admin"], "acme", store.SchedulingSettings{Weight: 2})
			return err
		}, false},
		{"invalid project change", func() error {
			_, err := db.SetProjectScheduling(ctx, callers["admin"], "WEB", store.SchedulingSettings{Weight: 0})
			return err
		}, false},
		{"organization change", func() error {
			_, err := db.SetOrganizationScheduling(ctx, callers["platform"], "acme", store.SchedulingSettings{Weight: 2})
			return err
		}, true},
		{"project change", func() error {
			_, err := db.SetProjectScheduling(ctx, callers["admin"], "WEB", store.SchedulingSettings{Weight: 9})
			return err
		}, true},
	} {
		err := tc.set()
		if tc.notify != (err == nil) {
			t.Fatalf("%s: err = %v", tc.name, err)
		}
		wait := 300 * time.Millisecond
		if tc.notify {
			wait = 30 * time.Second
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case tc.notify && err != nil:
			t.Fatalf("%s: no notification: %v", tc.name, err)
		case tc.notify && (n.Channel != store.DispatchChannel || n.Payload != `{"k":"w"}`):
			t.Fatalf("%s: notification %s %q", tc.name, n.Channel, n.Payload)
		case !tc.notify && err == nil:
			t.Fatalf("%s: notified %q", tc.name, n.Payload)
		}
	}
}

func TestPlannerBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, globex, web, _, _ := tenants(t, db)
	callers := schedCallers(acme, globex, web)
	if _, err := db.SetOrganizationScheduling(ctx, callers["platform"], "acme", store.SchedulingSettings{Weight: 5}); err != nil {
		t.Fatal(err)
	}
	eng := callers["engineer"]
	sess, err := db.CreateSession(ctx, eng, "WEB", "backlog")
	if err != nil {
		t.Fatal(err)
	}
	// No dispatcher runs: the first turn is ready and held back, the
	// second waits behind it.
	for _, text := range []string{"first", "second"} {
		if _, err := db.SendMessage(ctx, eng, sess.ID, text, "", store.QueueLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		who  string
		want store.Code
	}{{"admin", store.CodeForbidden}, {"engineer", store.CodeForbidden}, {"outsider", store.CodeForbidden}} {
		if _, err := db.PlannerBacklog(ctx, callers[tc.who]); !store.IsCode(err, tc.want) {
			t.Errorf("%s: err = %v, want %s", tc.who, err, tc.want)
		}
	}
	b, err := db.PlannerBacklog(ctx, callers["platform"])
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Items) != 1 || len(b.Items[0].Projects) != 1 {
		t.Fatalf("backlog %s, want acme with WEB alone", schedJSON(t, b))
	}
	o, p := b.Items[0], b.Items[0].Projects[0]
	want := store.BacklogCounts{Ready: 1, Waiting: 1}
	for _, got := range []struct {
		key    string
		weight int
		c      store.BacklogCounts
	}{{o.Key, o.Weight, o.BacklogCounts}, {p.Key, p.Weight, p.BacklogCounts}} {
		oldest := got.c.OldestReadySeconds
		got.c.OldestReadySeconds = 0
		if got.c != want || oldest < 0 || oldest > 600 {
			t.Errorf("%s: %+v (oldest %v), want %+v", got.key, got.c, oldest, want)
		}
	}
	if o.Key != "acme" || o.Weight != 5 || p.Key != "WEB" || p.Weight != 1 {
		t.Errorf("keys and weights: %s", schedJSON(t, b))
	}
}
