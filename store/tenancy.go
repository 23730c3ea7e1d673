package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Organization is the isolation boundary of SPEC §2.
type Organization struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Project belongs to one organization and owns one item key sequence.
type Project struct {
	ID             string    `json:"id"`
	OrganizationID string    `json:"organization_id"`
	Key            string    `json:"key"`
	Name           string    `json:"name"`
	Description    string    `json:"description"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Subject is someone or something that authenticates.
type Subject struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	DisplayName string    `json:"display_name"`
	Email       string    `json:"email,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// RoleBinding grants a role to a subject at a scope.
type RoleBinding struct {
	ID        string    `json:"id"`
	Subject   string    `json:"subject"`
	Role      Role      `json:"role"`
	Scope     Scope     `json:"scope"`
	CreatedAt time.Time `json:"created_at"`
}

// organizationColumns are what scanOrganization reads from organizations.
const organizationColumns = `id, key, name, created_at, updated_at`

func scanOrganization(row pgx.Row) (Organization, error) {
	var o Organization
	err := row.Scan(&o.ID, &o.Key, &o.Name, &o.CreatedAt, &o.UpdatedAt)
	return o, err
}

// projectColumns are what scanProject reads from projects.
const projectColumns = `id, organization_id, key, name, description, created_at, updated_at`

func scanProject(row pgx.Row) (Project, error) {
	var p Project
	err := row.Scan(&p.ID, &p.OrganizationID, &p.Key, &p.Name, &p.Description, &p.CreatedAt, &p.UpdatedAt)
	return p, err
}

// subjectColumns are what scanSubject reads from subjects.
const subjectColumns = `id, kind, display_name, COALESCE(email, ''), created_at`

func scanSubject(row pgx.Row) (Subject, error) {
	var s Subject
	err := row.Scan(&s.ID, &s.Kind, &s.DisplayName, &s.Email, &s.CreatedAt)
	return s, err
}

// roleBindingColumns are what scanRoleBinding reads from role_bindings.
const roleBindingColumns = `id, subject, role, scope_kind, COALESCE(organization_id::text, ''),
	COALESCE(project_id::text, ''), created_at`

func scanRoleBinding(row pgx.Row) (RoleBinding, error) {
	var b RoleBinding
	err := row.Scan(&b.ID, &b.Subject, &b.Role, &b.Scope.Kind, &b.Scope.OrganizationID, &b.Scope.ProjectID, &b.CreatedAt)
	return b, err
}

var (
	orgKeyRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,62}$`)
	projectKeyRe = regexp.MustCompile(`^[A-Z][A-Z0-9]{1,9}$`)
)

// CreateOrganization makes an organization; an existing key is already_exists.
func (db *DB) CreateOrganization(ctx context.Context, key, name string, actor Actor) (Organization, error) {
	if !orgKeyRe.MatchString(key) {
		return Organization{}, Errorf(CodeInvalid, "key: must match %s", orgKeyRe)
	}
	if name == "" || len(name) > 200 {
		return Organization{}, Errorf(CodeInvalid, "name: must be 1-200 characters")
	}
	var o Organization
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		o, err = scanOrganization(tx.QueryRow(ctx, `
			INSERT INTO organizations (key, name) VALUES ($1, $2)
			RETURNING `+organizationColumns, key, name))
		if isUniqueViolation(err, "") {
			return Errorf(CodeAlreadyExists, "organization %q already exists", key)
		}
		if err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: o.ID, Type: "organization.created",
			EntityType: "organization", EntityID: o.ID, EntityKey: o.Key, Actor: actor,
			Payload: MustJSON(map[string]any{"key": key, "name": name})})
		return err
	})
	if err != nil {
		return Organization{}, fmt.Errorf("store: create organization: %w", err)
	}
	return o, nil
}

// OrganizationByKey finds an organization by key (or id).
func (db *DB) OrganizationByKey(ctx context.Context, keyOrID string) (Organization, error) {
	o, err := scanOrganization(db.pool.QueryRow(ctx, `SELECT `+organizationColumns+` FROM organizations
		WHERE key = $1 OR id::text = $1`, keyOrID))
	if err != nil {
		return Organization{}, fmt.Errorf("store: organization: %w", notFound(err, "organization %q", keyOrID))
	}
	return o, nil
}

// CreateProject makes a project in an organization.
func (db *DB) CreateProject(ctx context.Context, organizationID, key, name string, actor Actor) (Project, error) {
	if !projectKeyRe.MatchString(key) {
		return Project{}, Errorf(CodeInvalid, "key: must match %s", projectKeyRe)
	}
	if name == "" || len(name) > 200 {
		return Project{}, Errorf(CodeInvalid, "name: must be 1-200 characters")
	}
	var p Project
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		p, err = scanProject(tx.QueryRow(ctx, `
			INSERT INTO projects (organization_id, key, name) VALUES ($1, $2, $3)
			RETURNING `+projectColumns, organizationID, key, name))
		if isUniqueViolation(err, "") {
			return Errorf(CodeAlreadyExists, "project %q already exists", key)
		}
		if err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: organizationID, ProjectID: p.ID,
			Type: "project.created", EntityType: "project", EntityID: p.ID, EntityKey: key, Actor: actor,
			Payload: MustJSON(map[string]any{"key": key, "name": name})})
		return err
	})
	if err != nil {
		return Project{}, fmt.Errorf("store: create project: %w", err)
	}
	return p, nil
}

// ProjectByKey finds a project by key (or id).
func (db *DB) ProjectByKey(ctx context.Context, keyOrID string) (Project, error) {
	p, err := scanProject(db.pool.QueryRow(ctx, `SELECT `+projectColumns+` FROM projects
		WHERE key = $1 OR id::text = $1`, keyOrID))
	if err != nil {
		return Project{}, fmt.Errorf("store: project: %w", notFound(err, "project %q", keyOrID))
	}
	return p, nil
}

// EnsureSubject creates the subject when it does not exist and returns the
// stored row (a subject that exists keeps its kind, name and email). An id
// must be 1-255 bytes of UTF-8 without NUL.
func (db *DB) EnsureSubject(ctx context.Context, s Subject) (Subject, error) {
	if err := ValidateSubjectID(s.ID); err != nil {
		return Subject{}, err
	}
	if s.Kind == "" {
		s.Kind = ActorHuman
	}
	var email *string
	if s.Email != "" {
		email = &s.Email
	}
	// The common case, a subject that exists, is a read: no row lock, so
	// that concurrent requests of one subject do not queue behind each other.
	stored, err := scanSubject(db.pool.QueryRow(ctx, `SELECT `+subjectColumns+` FROM subjects WHERE id = $1`, s.ID))
	if err == nil {
		return stored, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Subject{}, fmt.Errorf("store: ensure subject: %w", err)
	}
	// One upsert: when a concurrent request inserted the row first, the
	// no-op update locks and returns that row, which DO NOTHING would not.
	stored, err = scanSubject(db.pool.QueryRow(ctx, `
		INSERT INTO subjects (id, kind, display_name, email) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET id = subjects.id
		RETURNING `+subjectColumns, s.ID, s.Kind, s.DisplayName, email))
	if err != nil {
		return Subject{}, fmt.Errorf("store: ensure subject: %w", err)
	}
	return stored, nil
}

// ValidateSubjectID reports why id cannot name a subject: empty, over 255
// bytes, not UTF-8, or holding a NUL (which Postgres text cannot store).
func ValidateSubjectID(id string) error {
	switch {
	case id == "" || len(id) > 255:
		return Errorf(CodeInvalid, "subject: must be 1-255 bytes, got %d", len(id))
	case !utf8.ValidString(id):
		return Errorf(CodeInvalid, "subject: must be UTF-8")
	case strings.ContainsRune(id, 0):
		return Errorf(CodeInvalid, "subject: must not contain NUL")
	}
	return nil
}

// CreateRoleBinding binds role to subject at scope; the subject is created if
// new. Binding the same role at the same scope twice is already_exists.
func (db *DB) CreateRoleBinding(ctx context.Context, subject string, role Role, scope Scope, actor Actor) (RoleBinding, error) {
	if !role.Valid() {
		return RoleBinding{}, Errorf(CodeInvalid, "role: unknown role %q", role)
	}
	if _, err := db.EnsureSubject(ctx, Subject{ID: subject}); err != nil {
		return RoleBinding{}, err
	}
	var org, project *string
	if scope.OrganizationID != "" {
		org = &scope.OrganizationID
	}
	if scope.ProjectID != "" {
		project = &scope.ProjectID
	}
	b := RoleBinding{Subject: subject, Role: role, Scope: scope}
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO role_bindings (subject, role, scope_kind, organization_id, project_id)
			VALUES ($1, $2, $3, $4, $5) RETURNING id, created_at`,
			subject, role, scope.Kind, org, project).Scan(&b.ID, &b.CreatedAt)
		if isUniqueViolation(err, "") {
			return Errorf(CodeAlreadyExists, "%s is already %s at this scope", subject, role)
		}
		if err != nil {
			return mapCheck(err, "role binding: role %s cannot be bound at %s scope", role, scope.Kind)
		}
		if org == nil {
			return nil // platform bindings have no organization to log under
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: scope.OrganizationID, ProjectID: scope.ProjectID,
			Type: "role_binding.created", EntityType: "role_binding", EntityID: b.ID, Actor: actor,
			Payload: MustJSON(b)})
		return err
	})
	if err != nil {
		return RoleBinding{}, fmt.Errorf("store: create role binding: %w", err)
	}
	return b, nil
}

// Principal loads a subject's bindings. A subject with no row yet has none.
func (db *DB) Principal(ctx context.Context, subject string) (*Principal, error) {
	p := &Principal{Subject: subject, Kind: ActorHuman}
	_ = db.pool.QueryRow(ctx, `SELECT kind FROM subjects WHERE id = $1`, subject).Scan(&p.Kind)
	rows, err := db.pool.Query(ctx, `SELECT `+roleBindingColumns+`
		FROM role_bindings WHERE subject = $1 ORDER BY created_at`, subject)
	if err != nil {
		return nil, fmt.Errorf("store: principal: %w", err)
	}
	p.Bindings, err = collect(rows, scanRoleBinding)
	if err != nil {
		return nil, fmt.Errorf("store: principal: %w", err)
	}
	return p, nil
}
