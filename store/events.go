package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what both a pool and a transaction offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Actor kinds of SPEC §2.
const (
	ActorHuman   = "human"
	ActorService = "service"
	ActorSystem  = "system"
)

// Actor is who did something: a human, a service (the planner acting for a
// human) or the system.
type Actor struct {
	Kind      string `json:"kind"`
	Subject   string `json:"subject"`
	ActingFor string `json:"acting_for,omitempty"`
}

// HumanActor is a human acting for themselves.
func HumanActor(subject string) Actor { return Actor{Kind: ActorHuman, Subject: subject} }

// PlannerActor is the planner of a session acting for a human.
func PlannerActor(sessionID, human string) Actor {
	return Actor{Kind: ActorService, Subject: "planner:" + sessionID, ActingFor: human}
}

// SystemActor is the service itself.
func SystemActor() Actor { return Actor{Kind: ActorSystem, Subject: "system"} }

// Event is one entry of the append-only event log.
type Event struct {
	// Seq is the event's number within its organization (1, 2, 3, …
	// without gaps, visible in increasing order): what clients see, so
	// that no organization can count another's writes. It is assigned
	// after commit (NumberEvents), so it reads 0 until then.
	Seq int64 `json:"seq"`
	// LogSeq is the event's place in the global log, for ordering inside
	// the service only.
	LogSeq         int64           `json:"-"`
	OrganizationID string          `json:"-"`
	ProjectID      string          `json:"-"`
	Type           string          `json:"type"`
	EntityType     string          `json:"entity_type"`
	EntityID       string          `json:"entity_id"`
	EntityKey      string          `json:"entity_key,omitempty"`
	Actor          Actor           `json:"actor"`
	Payload        json.RawMessage `json:"payload"`
	OccurredAt     time.Time       `json:"occurred_at"`
}

// AppendEvent writes e in the caller's transaction, so that a write and its
// event commit together. It returns the event's place in the global log
// (LogSeq); its organization's number (Seq) is assigned after commit.
func AppendEvent(ctx context.Context, q Querier, e Event) (int64, error) {
	var seq int64
	if err := q.QueryRow(ctx, eventInsert, eventArgs(e)...).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store: append event %s: %w", e.Type, err)
	}
	return seq, nil
}

// eventInsert is AppendEvent's statement, for eventArgs; a batch queues it too.
const eventInsert = `
		INSERT INTO events (organization_id, project_id, type, entity_type, entity_id, entity_key,
		                    actor_kind, actor_subject, acting_for, payload)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		RETURNING seq`

// eventArgs are eventInsert's arguments for e.
func eventArgs(e Event) []any {
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	var project, key, actingFor *string
	if e.ProjectID != "" {
		project = &e.ProjectID
	}
	if e.EntityKey != "" {
		key = &e.EntityKey
	}
	if e.Actor.ActingFor != "" {
		actingFor = &e.Actor.ActingFor
	}
	return []any{e.OrganizationID, project, e.Type, e.EntityType, e.EntityID, key,
		e.Actor.Kind, e.Actor.Subject, actingFor, payload}
}

// MustJSON marshals v for an event payload; v must be marshalable.
func MustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("store: marshal payload: %v", err))
	}
	return b
}

// EntityEvents lists the events of one entity in order, for history endpoints.
func (db *DB) EntityEvents(ctx context.Context, entityType, entityID string, limit int) ([]Event, error) {
	if err := db.numberQueuedEvents(ctx); err != nil {
		return nil, fmt.Errorf("store: entity events: %w", err)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+eventColumns+`
		FROM events e WHERE entity_type = $1 AND entity_id = $2 ORDER BY seq LIMIT $3`,
		entityType, entityID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: entity events: %w", err)
	}
	return collect(rows, scanEvent)
}

// eventColumns are what scanEvent reads from events e: its number in the
// organization is looked up (0 until it is numbered).
// eventNumberedColumns are the same from events e joined with its number n.
const (
	eventColumns         = `e.seq, COALESCE((SELECT n.org_seq FROM event_numbers n WHERE n.seq = e.seq), 0), ` + eventFields
	eventNumberedColumns = `e.seq, n.org_seq, ` + eventFields
	eventFields          = `e.organization_id, COALESCE(e.project_id::text, ''), e.type, e.entity_type, e.entity_id,
	COALESCE(e.entity_key, ''), e.actor_kind, e.actor_subject, COALESCE(e.acting_for, ''), e.payload, e.occurred_at`
)

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	err := row.Scan(&e.LogSeq, &e.Seq, &e.OrganizationID, &e.ProjectID, &e.Type, &e.EntityType, &e.EntityID,
		&e.EntityKey, &e.Actor.Kind, &e.Actor.Subject, &e.Actor.ActingFor, &e.Payload, &e.OccurredAt)
	return e, err
}
