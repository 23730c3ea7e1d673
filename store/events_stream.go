package store

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CodeResyncRequired refuses a replay too long to send: the client reloads
// what it shows and subscribes again without a starting number.
const CodeResyncRequired Code = "resync_required"

// MaxReplay is how many events a stream subscription may replay; more is
// CodeResyncRequired.
const MaxReplay = 1000

// EventsChannel is the channel on which NumberEvents NOTIFYs, as it
// commits, each organization's highest new number as
// "<organization id>:<org_seq>".
const EventsChannel = "ballet_events"

var itemKeyRe = regexp.MustCompile(`^[A-Z][A-Z0-9]{1,9}-[1-9][0-9]{0,17}$`)

// EventFilter picks an organization's events: a project's, or an item's
// (its own and the dependencies naming it), or with neither set all of them.
type EventFilter struct {
	ProjectID string
	ItemID    string
	ItemKey   string
}

// Matches reports whether e passes the filter, the twin of EventsAfter's
// query for events read unfiltered.
func (f EventFilter) Matches(e Event) bool {
	switch {
	case f.ItemID != "":
		if e.EntityType == "item" {
			return e.EntityID == f.ItemID
		}
		if e.EntityType != "dependency" {
			return false
		}
		var d struct {
			From string `json:"from"`
			To   string `json:"to"`
		}
		if json.Unmarshal(e.Payload, &d) != nil {
			return false
		}
		return d.From == f.ItemKey || d.To == f.ItemKey
	case f.ProjectID != "":
		return e.ProjectID == f.ProjectID
	}
	return true
}

// Stream is a resolved event stream: its name, its organization, and the
// filter of its events.
type Stream struct {
	Name           string
	OrganizationID string
	Filter         EventFilter
}

// ResolveStream resolves a stream name, project:<KEY> or item:<KEY>, for a
// caller holding tracker.read on the project. A name of another form is
// invalid; a project or item the caller cannot see is not_found.
func (db *DB) ResolveStream(ctx context.Context, caller Caller, name string) (Stream, error) {
	kind, key, ok := strings.Cut(name, ":")
	switch {
	case !ok || (kind != "project" && kind != "item"):
		return Stream{}, Errorf(CodeInvalid, "stream: %q is not a stream: use project:<KEY> or item:<KEY>", name)
	case key == "":
		return Stream{}, Errorf(CodeInvalid, "stream: %q names no %s key", name, kind)
	case kind == "project" && !projectKeyRe.MatchString(key):
		return Stream{}, Errorf(CodeInvalid, "stream: %q is not a project key such as WEB", key)
	case kind == "item" && !itemKeyRe.MatchString(key):
		return Stream{}, Errorf(CodeInvalid, "stream: %q is not an item key such as WEB-12", key)
	}
	// Absent and invisible answer alike, so that no caller learns which
	// keys another organization uses.
	absent := Errorf(CodeNotFound, "%s %s not found", kind, key)
	s := Stream{Name: name}
	var projectID string
	if kind == "project" {
		p, err := db.ProjectByKey(ctx, key)
		if IsCode(err, CodeNotFound) {
			return Stream{}, absent
		}
		if err != nil {
			return Stream{}, fmt.Errorf("store: resolve stream: %w", err)
		}
		s.OrganizationID, projectID, s.Filter.ProjectID = p.OrganizationID, p.ID, p.ID
	} else {
		it, err := itemByKey(ctx, db.pool, key, false)
		if IsCode(err, CodeNotFound) {
			return Stream{}, absent
		}
		if err != nil {
			return Stream{}, fmt.Errorf("store: resolve stream: %w", err)
		}
		s.OrganizationID, projectID = it.OrganizationID, it.ProjectID
		s.Filter.ItemID, s.Filter.ItemKey = it.ID, it.Key
	}
	if err := caller.Authorize(PermTrackerRead, s.OrganizationID, projectID); err != nil {
		if IsCode(err, CodeNotFound) {
			return Stream{}, absent
		}
		return Stream{}, fmt.Errorf("store: resolve stream: %w", err)
	}
	return s, nil
}

// EventsAfter returns up to limit of the organization's committed events
// numbered after afterSeq that pass the filter, in number order. Numbers
// become visible in increasing order (NumberEvents), so a read after N
// never misses a number below one it returns.
func (db *DB) EventsAfter(ctx context.Context, organizationID string, f EventFilter, afterSeq int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = MaxReplay
	}
	var rows pgx.Rows
	var err error
	switch {
	case f.ItemID != "":
		// The item's events and its dependencies' through their indexes.
		rows, err = db.pool.Query(ctx, `SELECT `+eventNumberedColumns+`
			FROM events e JOIN event_numbers n ON n.seq = e.seq
			WHERE e.organization_id = $1 AND n.org_seq > $2
			  AND ((e.entity_type = 'item' AND e.entity_id = $3)
			    OR (e.entity_type = 'dependency' AND (e.payload->>'from' = $4 OR e.payload->>'to' = $4)))
			ORDER BY n.org_seq LIMIT $5`, organizationID, afterSeq, f.ItemID, f.ItemKey, limit)
	case f.ProjectID != "":
		rows, err = db.pool.Query(ctx, `SELECT `+eventNumberedColumns+`
			FROM event_numbers n JOIN events e ON e.seq = n.seq
			WHERE n.project_id = $1 AND n.org_seq > $2 AND n.organization_id = $3
			ORDER BY n.org_seq LIMIT $4`, f.ProjectID, afterSeq, organizationID, limit)
	default:
		rows, err = db.pool.Query(ctx, `SELECT `+eventNumberedColumns+`
			FROM event_numbers n JOIN events e ON e.seq = n.seq
			WHERE n.organization_id = $1 AND n.org_seq > $2
			ORDER BY n.org_seq LIMIT $3`, organizationID, afterSeq, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("store: events after %d: %w", afterSeq, err)
	}
	events, err := collect(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("store: events after %d: %w", afterSeq, err)
	}
	return events, nil
}

// LatestEventSeq is the organization's last event number (0 before its
// first event), once what had committed when it was called is numbered: a
// stream that goes live from it gets every event committed after the call,
// and none before.
func (db *DB) LatestEventSeq(ctx context.Context, organizationID string) (int64, error) {
	if err := db.numberQueuedEvents(ctx); err != nil {
		return 0, fmt.Errorf("store: latest event: %w", err)
	}
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT COALESCE((SELECT last_seq FROM organization_event_counters
		WHERE organization_id = $1), 0)`, organizationID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: latest event: %w", err)
	}
	return n, nil
}

// ListenEvents opens a connection of its own, outside the pool, listening
// on EventsChannel; the caller waits on it with WaitForNotification and
// closes it. Its application_name is name, for pg_stat_activity.
func (db *DB) ListenEvents(ctx context.Context, name string) (*pgx.Conn, error) {
	cfg := db.pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: listen events: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+EventsChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("store: listen events: %w", err)
	}
	return conn, nil
}

// ParseEventNotification reads an EventsChannel payload: the organization
// and the event's number.
func ParseEventNotification(payload string) (organizationID string, seq int64, ok bool) {
	org, n, found := strings.Cut(payload, ":")
	if !found || org == "" {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	if err != nil || seq < 1 {
		return "", 0, false
	}
	return org, seq, true
}
