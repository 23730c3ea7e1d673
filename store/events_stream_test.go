package store_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
)

// streamFixture is the tracker fixture with a second project API in acme,
// where the WEB engineer holds nothing, and an organization admin of acme.
type streamFixture struct {
	*trackerFixture
	api   store.Project
	admin store.Caller
}

func newStreamFixture(t *testing.T) *streamFixture {
	t.Helper()
	f := &streamFixture{trackerFixture: newTrackerFixture(t)}
	var err error
	if f.api, err = f.db.CreateProject(context.Background(), f.org.ID, "API", "Api", store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	f.admin = store.HumanCaller(&store.Principal{Subject: "admin@example.com", Kind: store.ActorHuman,
		Bindings: []store.RoleBinding{{Subject: "admin@example.com", Role: store.RoleOrganizationAdmin,
			Scope: store.Scope{Kind: store.ScopeOrganization, OrganizationID: f.org.ID}}}})
	return f
}

func TestResolveStream(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	ctx := context.Background()
	item := f.create(t, store.NewItem{Kind: store.KindTicket})
	glx, err := f.db.CreateItem(ctx, f.otherEngineer, "GLX", store.NewItem{Kind: store.KindTicket, Title: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		caller store.Caller
		stream string
		want   store.EventFilter
		code   store.Code
		msg    string
	}{
		{"project", f.engineer, "project:WEB", store.EventFilter{ProjectID: f.project.ID}, "", ""},
		{"item", f.viewer, "item:" + item.Key, store.EventFilter{ItemID: item.ID, ItemKey: item.Key}, "", ""},
		{"empty", f.engineer, "", store.EventFilter{}, store.CodeInvalid, `"" is not a stream: use project:<KEY> or item:<KEY>`},
		{"unknown prefix", f.engineer, "projects:WEB", store.EventFilter{}, store.CodeInvalid, "is not a stream"},
		{"no prefix", f.engineer, "WEB", store.EventFilter{}, store.CodeInvalid, "is not a stream"},
		{"missing project key", f.engineer, "project:", store.EventFilter{}, store.CodeInvalid, `"project:" names no project key`},
		{"missing item key", f.engineer, "item:", store.EventFilter{}, store.CodeInvalid, `"item:" names no item key`},
		{"bad project key", f.engineer, "project:web", store.EventFilter{}, store.CodeInvalid, `"web" is not a project key`},
		{"project id", f.engineer, "project:" + f.project.ID, store.EventFilter{}, store.CodeInvalid, "is not a project key"},
		{"bad item key", f.engineer, "item:WEB", store.EventFilter{}, store.CodeInvalid, `"WEB" is not an item key`},
		{"absent project", f.engineer, "project:NOPE", store.EventFilter{}, store.CodeNotFound, "project NOPE not found"},
		{"absent item", f.engineer, "item:WEB-999", store.EventFilter{}, store.CodeNotFound, "item WEB-999 not found"},
		{"other organization's project", f.engineer, "project:GLX", store.EventFilter{}, store.CodeNotFound, "project GLX not found"},
		{"other organization's item", f.engineer, "item:" + glx.Key, store.EventFilter{}, store.CodeNotFound, "item " + glx.Key + " not found"},
		{"project without tracker.read", f.engineer, "project:API", store.EventFilter{}, store.CodeForbidden, "needs tracker.read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := f.db.ResolveStream(ctx, tt.caller, tt.stream)
			if tt.code != "" {
				wantErr(t, err, tt.code, tt.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tt.stream || s.OrganizationID != f.org.ID || s.Filter != tt.want {
				t.Fatalf("stream = %+v, want %s of %s with %+v", s, tt.stream, f.org.ID, tt.want)
			}
		})
	}
}

// TestEventsAfterFilters checks each stream's query against its Go twin
// (EventFilter.Matches) over the organization's whole log, and the paging.
func TestEventsAfterFilters(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	ctx := context.Background()
	a := f.create(t, store.NewItem{Kind: store.KindTicket, Title: "a"})
	b := f.create(t, store.NewItem{Kind: store.KindTicket, Title: "b"})
	c, err := f.db.CreateItem(ctx, f.admin, "API", store.NewItem{Kind: store.KindTicket, Title: "c"})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := f.db.AddDependency(ctx, f.engineer, b.Key, a.Key, store.DependencyBlocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.TransitionItem(ctx, f.engineer, a.Key, store.StateReady, a.Version); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteDependency(ctx, f.engineer, dep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CreateItem(ctx, f.otherEngineer, "GLX", store.NewItem{Kind: store.KindTicket, Title: "theirs"}); err != nil {
		t.Fatal(err)
	}
	numberAll(t, f.db)

	all, err := f.db.EventsAfter(ctx, f.org.ID, store.EventFilter{}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range all {
		if e.Seq != int64(i+1) || e.OrganizationID != f.org.ID {
			t.Fatalf("event %d: seq %d of %s, want %d of %s", i, e.Seq, e.OrganizationID, i+1, f.org.ID)
		}
	}
	latest, err := f.db.LatestEventSeq(ctx, f.org.ID)
	if err != nil || latest != int64(len(all)) {
		t.Fatalf("latest = %d, %v; want %d", latest, err, len(all))
	}
	if n, err := f.db.LatestEventSeq(ctx, "00000000-0000-0000-0000-000000000000"); err != nil || n != 0 {
		t.Fatalf("latest of an organization without events = %d, %v; want 0", n, err)
	}
	types := func(es []store.Event) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Type+" "+e.EntityKey)
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		filter store.EventFilter
		want   []string
	}{
		{"project WEB", store.EventFilter{ProjectID: f.project.ID}, []string{"project.created WEB", "item.created " + a.Key, "item.created " + b.Key,
			"dependency.added " + b.Key, "item.state_changed " + a.Key, "dependency.removed " + b.Key}},
		{"project API", store.EventFilter{ProjectID: f.api.ID}, []string{"project.created API", "item.created " + c.Key}},
		{"item a, with the dependency naming it", store.EventFilter{ItemID: a.ID, ItemKey: a.Key}, []string{"item.created " + a.Key,
			"dependency.added " + b.Key, "item.state_changed " + a.Key, "dependency.removed " + b.Key}},
		{"item c", store.EventFilter{ItemID: c.ID, ItemKey: c.Key}, []string{"item.created " + c.Key}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.db.EventsAfter(ctx, f.org.ID, tt.filter, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(types(got), tt.want) {
				t.Fatalf("events = %q, want %q", types(got), tt.want)
			}
			twin := slices.DeleteFunc(slices.Clone(all), func(e store.Event) bool { return !tt.filter.Matches(e) })
			if !slices.EqualFunc(got, twin, func(x, y store.Event) bool { return x.Seq == y.Seq && x.LogSeq == y.LogSeq }) {
				t.Fatalf("query %q and Matches %q disagree", types(got), types(twin))
			}
			// Paged one by one from each event's number: the same events.
			var paged []store.Event
			for after := int64(0); ; {
				page, err := f.db.EventsAfter(ctx, f.org.ID, tt.filter, after, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				paged, after = append(paged, page...), page[0].Seq
			}
			if !slices.Equal(types(paged), tt.want) {
				t.Fatalf("paged = %q, want %q", types(paged), tt.want)
			}
		})
	}
}

// TestEventNotifyAtNumbering: an event is numbered only once its
// transaction committed, and its number is NOTIFYed as the numbering
// commits.
func TestEventNotifyAtNumbering(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	ctx := context.Background()
	conn, err := f.db.ListenEvents(ctx, "events-test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	numberAll(t, f.db) // the fixture's own events
	for range 2 {      // the fixture's organizations' notifications
		if _, err := conn.WaitForNotification(ctx); err != nil {
			t.Fatal(err)
		}
	}
	latest, _ := f.db.LatestEventSeq(ctx, f.org.ID)
	otherLatest, _ := f.db.LatestEventSeq(ctx, f.otherOrg.ID)

	open, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	appendIn := func(tx pgx.Tx, org string) {
		t.Helper()
		if _, err := store.AppendEvent(ctx, tx, store.Event{OrganizationID: org, Type: "test.event", EntityType: "test",
			EntityID: "x", Actor: store.SystemActor()}); err != nil {
			t.Fatal(err)
		}
	}
	appendIn(open, f.org.ID)
	if err := f.db.Tx(ctx, func(tx pgx.Tx) error { appendIn(tx, f.otherOrg.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel != store.EventsChannel {
			t.Fatalf("channel %q, want %q", n.Channel, store.EventsChannel)
		}
		return n.Payload
	}
	want := func(org string, seq int64) string { return org + ":" + strconv.FormatInt(seq, 10) }
	number := func(wantEvents int) {
		t.Helper()
		got, err := f.db.NumberEvents(ctx, store.EventNumberBatch)
		if err != nil {
			t.Fatal(err)
		}
		if got.Events != wantEvents {
			t.Fatalf("NumberEvents numbered %d events, want %d", got.Events, wantEvents)
		}
	}
	number(1) // the committed one alone: the open transaction's is not queued yet
	if got := next(); got != want(f.otherOrg.ID, otherLatest+1) {
		t.Fatalf("first notification %q, want the committed %q (the open transaction's comes after its commit)", got, want(f.otherOrg.ID, otherLatest+1))
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	number(1)
	if got := next(); got != want(f.org.ID, latest+1) {
		t.Fatalf("notification %q, want %q", got, want(f.org.ID, latest+1))
	}
	org, seq, ok := store.ParseEventNotification(want(f.org.ID, latest+1))
	if !ok || org != f.org.ID || seq != latest+1 {
		t.Fatalf("parse = %q %d %v", org, seq, ok)
	}
	for _, bad := range []string{"", "x", ":1", f.org.ID + ":", f.org.ID + ":0", f.org.ID + ":-3", f.org.ID + ":a"} {
		if _, _, ok := store.ParseEventNotification(bad); ok {
			t.Errorf("ParseEventNotification(%q) accepted", bad)
		}
	}
	var app string
	if err := f.db.Pool().QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE pid = $1`,
		conn.PgConn().PID()).Scan(&app); err != nil || app != "events-test" {
		t.Fatalf("application_name = %q, %v", app, err)
	}
}
