package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Block is one content block of a planner message (SPEC §7): text,
// tool_use or tool_result (results travel in a user message).
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// Block types.
const (
	BlockText       = "text"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
)

// MessageUsage is the token accounting of one model answer.
type MessageUsage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// Message is one stored message of a planner session.
type Message struct {
	Seq        int64        `json:"seq"`
	Role       string       `json:"role"`
	Content    []Block      `json:"content"`
	Author     string       `json:"author,omitempty"`
	StopReason string       `json:"stop_reason,omitempty"`
	Usage      MessageUsage `json:"usage"`
	Turn       string       `json:"turn,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
}

// Session is a planner conversation in a project.
type Session struct {
	ID             string    `json:"id"`
	Project        string    `json:"project"`
	Title          string    `json:"title"`
	CreatedBy      string    `json:"created_by"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	Running        bool      `json:"running"`
	Messages       []Message `json:"messages,omitempty"`
	ProjectID      string    `json:"-"`
	OrganizationID string    `json:"-"`
}

// sessionSelect selects what scanSession reads.
const sessionSelect = `SELECT s.id, p.key, s.title, s.created_by, s.created_at, s.updated_at,
	EXISTS (SELECT 1 FROM planner_turns t WHERE t.session_id = s.id AND t.status = 'running' AND t.finished_at IS NULL),
	s.project_id, p.organization_id
	FROM planner_sessions s JOIN projects p ON p.id = s.project_id`

func scanSession(row pgx.Row) (Session, error) {
	var s Session
	err := row.Scan(&s.ID, &s.Project, &s.Title, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt, &s.Running,
		&s.ProjectID, &s.OrganizationID)
	return s, err
}

// CreateSession starts a planner session in a project (tracker.write).
func (db *DB) CreateSession(ctx context.Context, caller Caller, projectKey, title string) (Session, error) {
	title = strings.TrimSpace(title)
	if n := utf8.RuneCountInString(title); n < 1 || n > 200 {
		return Session{}, Errorf(CodeInvalid, "title: must be 1-200 characters, got %d", n)
	}
	p, err := db.ProjectByKey(ctx, projectKey)
	if err != nil {
		return Session{}, err
	}
	if err := caller.Authorize(PermTrackerWrite, p.OrganizationID, p.ID); err != nil {
		return Session{}, err
	}
	if _, err := db.EnsureSubject(ctx, Subject{ID: caller.Principal.Subject}); err != nil {
		return Session{}, err
	}
	var s Session
	err = db.txPipelined(ctx, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO planner_sessions (project_id, title, created_by)
			VALUES ($1, $2, $3) RETURNING id`, p.ID, title, caller.Principal.Subject).Scan(&id); err != nil {
			return err
		}
		s, err = scanSession(tx.QueryRow(ctx, sessionSelect+` WHERE s.id = $1`, id))
		if err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: p.OrganizationID, ProjectID: p.ID,
			Type: "planner.session_created", EntityType: "planner_session", EntityID: id, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"title": title})})
		return err
	})
	if err != nil {
		return Session{}, fmt.Errorf("store: create session: %w", err)
	}
	return s, nil
}

// ListSessions lists a project's sessions, the one a human last sent a
// message to first (to the second; ties by id).
func (db *DB) ListSessions(ctx context.Context, caller Caller, projectKey string, limit int) ([]Session, error) {
	p, err := db.ProjectByKey(ctx, projectKey)
	if err != nil {
		return nil, err
	}
	if err := caller.Authorize(PermTrackerRead, p.OrganizationID, p.ID); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 200 {
		limit = 200
	}
	rows, err := db.pool.Query(ctx, sessionSelect+`
		WHERE s.project_id = $1 ORDER BY s.last_active_at DESC, s.id LIMIT $2`, p.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	out, err := collect(rows, scanSession)
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	return out, nil
}

// SessionByID loads a session without its messages and without checking
// permissions; callers authorize with its organization and project.
func (db *DB) SessionByID(ctx context.Context, id string) (Session, error) {
	if !looksLikeUUID(id) {
		return Session{}, Errorf(CodeNotFound, "session %q not found", id)
	}
	s, err := scanSession(db.pool.QueryRow(ctx, sessionSelect+` WHERE s.id = $1`, id))
	if err != nil {
		return Session{}, fmt.Errorf("store: session: %w", notFound(err, "session %q", id))
	}
	return s, nil
}

// authorizedSession loads a session and checks perm on its project.
func (db *DB) authorizedSession(ctx context.Context, caller Caller, id string, perm Permission) (Session, error) {
	s, err := db.SessionByID(ctx, id)
	if err != nil {
		return Session{}, err
	}
	if err := caller.Authorize(perm, s.OrganizationID, s.ProjectID); err != nil {
		if IsCode(err, CodeNotFound) {
			return Session{}, Errorf(CodeNotFound, "session %q not found", id)
		}
		return Session{}, err
	}
	return s, nil
}

// GetSession returns the session with every message (tracker.read).
func (db *DB) GetSession(ctx context.Context, caller Caller, id string) (Session, error) {
	s, err := db.authorizedSession(ctx, caller, id, PermTrackerRead)
	if err != nil {
		return Session{}, err
	}
	s.Messages, err = db.Messages(ctx, id)
	if err != nil {
		return Session{}, err
	}
	return s, nil
}

// Messages returns a session's messages in conversation order (by turn,
// then seq).
func (db *DB) Messages(ctx context.Context, sessionID string) ([]Message, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+messageColumns+`
		FROM planner_messages m LEFT JOIN planner_turns t ON t.id = m.turn_id AND t.session_id = $1
		WHERE m.session_id = $1 ORDER BY t.position NULLS FIRST, m.seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("store: messages: %w", err)
	}
	msgs, err := collect(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("store: messages: %w", err)
	}
	return msgs, nil
}

// messageColumns are what scanMessage reads from planner_messages m.
const messageColumns = `m.seq, m.role, m.content, COALESCE(m.author, ''), COALESCE(m.stop_reason, ''), m.usage,
	COALESCE(m.turn_id::text, ''), m.created_at`

// scanMessage reads the content and usage with jsonv2 (planner_json.go).
func scanMessage(r pgx.Row) (Message, error) {
	var m Message
	err := r.Scan(&m.Seq, &m.Role, (*blocksJSON)(&m.Content), &m.Author, &m.StopReason, (*usageJSON)(&m.Usage),
		&m.Turn, &m.CreatedAt)
	return m, err
}

// looksLikeUUID reports whether s is a UUID in its canonical textual form
// (36 characters, hyphenated; not urn:uuid:, braced or bare hex, which
// uuid.Parse also takes), so that a bad id is a clean not_found rather than
// a database error.
func looksLikeUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
