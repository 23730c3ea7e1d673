package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Skill is a SKILL.md with an editable draft and immutable published
// versions (SPEC §5). Scope is "platform", "organization:<key>" or
// "project:<key>".
type Skill struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Scope          string    `json:"scope"`
	ScopeKind      string    `json:"-"`
	OrganizationID string    `json:"-"`
	ProjectID      string    `json:"-"`
	Description    string    `json:"description"`
	Draft          string    `json:"draft"`
	LatestVersion  int       `json:"latest_version"`
	CreatedBy      string    `json:"created_by"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// SkillVersion is one published, immutable version of a skill. Lists leave
// Body empty.
type SkillVersion struct {
	SkillID   string    `json:"skill_id"`
	Name      string    `json:"name"`
	Version   int       `json:"version"`
	Body      string    `json:"body,omitempty"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// skillVersionColumns are what scanSkillVersion reads from skill_versions;
// skillVersionHeadColumns are the same with the body left out, for lists.
// A version's Name is its skill's, set by the caller.
const (
	skillVersionColumns     = `skill_id, version, body, created_by, created_at`
	skillVersionHeadColumns = `skill_id, version, '', created_by, created_at`
)

func scanSkillVersion(row pgx.Row) (SkillVersion, error) {
	var v SkillVersion
	err := row.Scan(&v.SkillID, &v.Version, &v.Body, &v.CreatedBy, &v.CreatedAt)
	return v, err
}

// NewSkill is what CreateSkill needs.
type NewSkill struct {
	Name        string `json:"name"`
	Scope       string `json:"scope"`
	Description string `json:"description"`
	Draft       string `json:"draft"`
}

// SkillDraftUpdate changes a skill's draft; nil fields stay as they are.
type SkillDraftUpdate struct {
	Description *string `json:"description"`
	Draft       *string `json:"draft"`
}

// Limits of SPEC §5 and the schema.
const (
	maxSkillDescription = 1000
	maxSkillBody        = 200000
)

var skillNameRe = regexp.MustCompile(`^[a-z0-9-]{2,64}$`)

// ValidSkillName reports whether name is 2-64 characters of [a-z0-9-].
func ValidSkillName(name string) bool { return skillNameRe.MatchString(name) }

// skillColumns are what scanSkill reads from skills s joined by skillFrom.
const skillColumns = `s.id, s.name, s.scope_kind, COALESCE(s.organization_id::text, ''), COALESCE(s.project_id::text, ''),
	COALESCE(o.key, ''), COALESCE(p.key, ''), s.description, s.draft, s.latest_version, s.created_by, s.created_at, s.updated_at`

const skillFrom = ` FROM skills s LEFT JOIN organizations o ON o.id = s.organization_id
	LEFT JOIN projects p ON p.id = s.project_id`

func scanSkill(row pgx.Row) (Skill, error) {
	var s Skill
	var orgKey, projectKey string
	err := row.Scan(&s.ID, &s.Name, &s.ScopeKind, &s.OrganizationID, &s.ProjectID, &orgKey, &projectKey,
		&s.Description, &s.Draft, &s.LatestVersion, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt)
	s.Scope = scopeString(s.ScopeKind, orgKey, projectKey)
	return s, err
}

func scopeString(kind, orgKey, projectKey string) string {
	switch kind {
	case ScopeOrganization:
		return ScopeOrganization + ":" + orgKey
	case ScopeProject:
		return ScopeProject + ":" + projectKey
	}
	return kind
}

// skillScope is a parsed scope string.
type skillScope struct {
	kind, organizationID, projectID string
}

// resolveSkillScope parses "platform", "organization:<key>" or
// "project:<key>" and authorizes perm at it. An organization or project
// the caller cannot see answers exactly like a missing one.
func (db *DB) resolveSkillScope(ctx context.Context, caller Caller, perm Permission, scope string) (skillScope, error) {
	kind, key, _ := strings.Cut(scope, ":")
	switch {
	case scope == ScopePlatform:
		return skillScope{kind: ScopePlatform}, authorizePlatformSkill(caller, perm)
	case kind == ScopeOrganization && key != "":
		o, err := db.OrganizationByKey(ctx, key)
		if err == nil && perm == PermSkillRead && caller.Principal.canInOrganization(perm, o.ID) {
			return skillScope{kind: kind, organizationID: o.ID}, nil // readable wherever it applies
		}
		o, err = db.kbOrganization(ctx, caller, perm, key)
		return skillScope{kind: kind, organizationID: o.ID}, err
	case kind == ScopeProject && key != "":
		p, err := db.kbProject(ctx, caller, perm, key)
		return skillScope{kind: kind, organizationID: p.OrganizationID, projectID: p.ID}, err
	}
	return skillScope{}, Errorf(CodeInvalid, "scope: must be platform, organization:<key> or project:<key>, got %q", scope)
}

func validateSkillText(description, draft *string) error {
	if description != nil && utf8.RuneCountInString(*description) > maxSkillDescription {
		return Errorf(CodeInvalid, "description: at most %d characters", maxSkillDescription)
	}
	if draft != nil && utf8.RuneCountInString(*draft) > maxSkillBody {
		return Errorf(CodeInvalid, "draft: at most %d characters", maxSkillBody)
	}
	return nil
}

// skillEvent appends a skill event; platform skills have no organization to
// log under, so their writes append none.
func skillEvent(ctx context.Context, tx pgx.Tx, caller Caller, typ string, s Skill, payload any) error {
	if s.OrganizationID == "" {
		return nil
	}
	_, err := AppendEvent(ctx, tx, Event{OrganizationID: s.OrganizationID, ProjectID: s.ProjectID, Type: typ,
		EntityType: "skill", EntityID: s.ID, EntityKey: s.Name, Actor: caller.Actor, Payload: MustJSON(payload)})
	return err
}

// CreateSkill makes a skill with a draft and no published version. It needs
// skill.write at the skill's scope (platform-admin for platform skills).
func (db *DB) CreateSkill(ctx context.Context, caller Caller, n NewSkill) (Skill, error) {
	if !ValidSkillName(n.Name) {
		return Skill{}, fmt.Errorf("store: create skill: %w",
			Errorf(CodeInvalid, "name: must be 2-64 characters of a-z, 0-9 and -, got %q", n.Name))
	}
	if err := validateSkillText(&n.Description, &n.Draft); err != nil {
		return Skill{}, fmt.Errorf("store: create skill: %w", err)
	}
	sc, err := db.resolveSkillScope(ctx, caller, PermSkillWrite, n.Scope)
	if err != nil {
		return Skill{}, fmt.Errorf("store: create skill: %w", err)
	}
	var s Skill
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `
			INSERT INTO skills (name, scope_kind, organization_id, project_id, description, draft, created_by)
			VALUES ($1, $2, NULLIF($3, '')::uuid, NULLIF($4, '')::uuid, $5, $6, $7) RETURNING id`,
			n.Name, sc.kind, sc.organizationID, sc.projectID, n.Description, n.Draft, humanOf(caller)).Scan(&id)
		if isUniqueViolation(err, "") {
			return Errorf(CodeAlreadyExists, "skill %q already exists at scope %s", n.Name, n.Scope)
		}
		if err != nil {
			return err
		}
		if s, err = scanSkill(tx.QueryRow(ctx, `SELECT `+skillColumns+skillFrom+` WHERE s.id = $1`, id)); err != nil {
			return err
		}
		return skillEvent(ctx, tx, caller, "skill.created", s, map[string]any{"name": s.Name, "scope": s.Scope})
	})
	if err != nil {
		return Skill{}, fmt.Errorf("store: create skill: %w", err)
	}
	return s, nil
}

// skillByID loads a skill without authorizing; an unknown or malformed id is
// not found.
func skillByID(ctx context.Context, q Querier, id string, lock bool) (Skill, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Skill{}, Errorf(CodeNotFound, "skill %q not found", id)
	}
	sql := `SELECT ` + skillColumns + skillFrom + ` WHERE s.id = $1`
	if lock {
		sql += ` FOR UPDATE OF s`
	}
	s, err := scanSkill(q.QueryRow(ctx, sql, id))
	return s, notFound(err, "skill %q", id)
}

// getSkill loads a skill and authorizes perm on it; one the caller cannot
// see answers like a missing one.
func (db *DB) getSkill(ctx context.Context, q Querier, caller Caller, perm Permission, id string, lock bool) (Skill, error) {
	s, err := skillByID(ctx, q, id, lock)
	if err == nil {
		err = authorizeSkill(caller, perm, s)
	}
	if IsCode(err, CodeNotFound) {
		return Skill{}, Errorf(CodeNotFound, "skill %q not found", id)
	}
	return s, err
}

// GetSkill returns a skill with its draft (skill.read where it applies).
func (db *DB) GetSkill(ctx context.Context, caller Caller, id string) (Skill, error) {
	s, err := db.getSkill(ctx, db.pool, caller, PermSkillRead, id, false)
	if err != nil {
		return Skill{}, fmt.Errorf("store: get skill: %w", err)
	}
	return s, nil
}

// ListSkills lists the skills the caller may read, by scope then name. A
// non-empty scope ("platform", "organization:<key>", "project:<key>")
// restricts the list to that exact scope.
func (db *DB) ListSkills(ctx context.Context, caller Caller, scope string) ([]Skill, error) {
	where, args := `TRUE`, []any{}
	if scope != "" {
		sc, err := db.resolveSkillScope(ctx, caller, PermSkillRead, scope)
		if err != nil {
			return nil, fmt.Errorf("store: list skills: %w", err)
		}
		where = `s.scope_kind = $1 AND COALESCE(s.organization_id::text, '') = $2 AND COALESCE(s.project_id::text, '') = $3`
		args = []any{sc.kind, sc.organizationID, sc.projectID}
	} else if !caller.Principal.IsPlatformAdmin() {
		where, args = `(s.organization_id IS NULL OR s.organization_id::text = ANY($1))`, []any{visibleOrganizations(caller.Principal)}
	}
	rows, err := db.pool.Query(ctx, `SELECT `+skillColumns+skillFrom+` WHERE `+where+`
		ORDER BY CASE s.scope_kind WHEN 'platform' THEN 0 WHEN 'organization' THEN 1 ELSE 2 END, o.key, p.key, s.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list skills: %w", err)
	}
	all, err := collect(rows, scanSkill)
	if err != nil {
		return nil, fmt.Errorf("store: list skills: %w", err)
	}
	out := make([]Skill, 0, len(all))
	for _, s := range all {
		if authorizeSkill(caller, PermSkillRead, s) == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// UpdateSkillDraft changes a skill's draft or description (skill.write).
// Published versions are never touched.
func (db *DB) UpdateSkillDraft(ctx context.Context, caller Caller, id string, u SkillDraftUpdate) (Skill, error) {
	if u.Description == nil && u.Draft == nil {
		return Skill{}, fmt.Errorf("store: update skill: %w", Errorf(CodeInvalid, "give at least one of description, draft"))
	}
	if err := validateSkillText(u.Description, u.Draft); err != nil {
		return Skill{}, fmt.Errorf("store: update skill: %w", err)
	}
	var s Skill
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		if s, err = db.getSkill(ctx, tx, caller, PermSkillWrite, id, true); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `
			UPDATE skills SET description = COALESCE($2, description), draft = COALESCE($3, draft), updated_at = now()
			WHERE id = $1 RETURNING description, draft, updated_at`, id, u.Description, u.Draft).
			Scan(&s.Description, &s.Draft, &s.UpdatedAt); err != nil {
			return err
		}
		return skillEvent(ctx, tx, caller, "skill.updated", s, map[string]any{"name": s.Name, "scope": s.Scope,
			"description_changed": u.Description != nil, "draft_changed": u.Draft != nil})
	})
	if err != nil {
		return Skill{}, fmt.Errorf("store: update skill: %w", err)
	}
	return s, nil
}

// PublishSkill makes the draft immutable version latest+1 (skill.write).
// Concurrent publishes serialize on the skill row; an empty draft is refused.
func (db *DB) PublishSkill(ctx context.Context, caller Caller, id string) (SkillVersion, error) {
	var v SkillVersion
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		s, err := db.getSkill(ctx, tx, caller, PermSkillWrite, id, true)
		if err != nil {
			return err
		}
		if strings.TrimSpace(s.Draft) == "" {
			return Errorf(CodeInvalid, "draft: skill %q has an empty draft; nothing to publish", s.Name)
		}
		v = SkillVersion{SkillID: s.ID, Name: s.Name, Version: s.LatestVersion + 1, Body: s.Draft, CreatedBy: humanOf(caller)}
		if err := tx.QueryRow(ctx, `
			INSERT INTO skill_versions (skill_id, version, body, created_by) VALUES ($1, $2, $3, $4) RETURNING created_at`,
			s.ID, v.Version, v.Body, v.CreatedBy).Scan(&v.CreatedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE skills SET latest_version = $2, updated_at = now() WHERE id = $1`, s.ID, v.Version); err != nil {
			return err
		}
		return skillEvent(ctx, tx, caller, "skill.published", s, map[string]any{"name": s.Name, "scope": s.Scope, "version": v.Version})
	})
	if err != nil {
		return SkillVersion{}, fmt.Errorf("store: publish skill: %w", err)
	}
	return v, nil
}

// ListSkillVersions lists a skill's published versions, newest first,
// without their bodies (skill.read).
func (db *DB) ListSkillVersions(ctx context.Context, caller Caller, id string) ([]SkillVersion, error) {
	s, err := db.getSkill(ctx, db.pool, caller, PermSkillRead, id, false)
	if err != nil {
		return nil, fmt.Errorf("store: list skill versions: %w", err)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+skillVersionHeadColumns+`
		FROM skill_versions WHERE skill_id = $1 ORDER BY version DESC`, s.ID)
	if err != nil {
		return nil, fmt.Errorf("store: list skill versions: %w", err)
	}
	vs, err := collect(rows, scanSkillVersion)
	if err != nil {
		return nil, fmt.Errorf("store: list skill versions: %w", err)
	}
	for i := range vs {
		vs[i].Name = s.Name
	}
	return vs, nil
}

// GetSkillVersion returns published version n of a skill with its body
// (skill.read).
func (db *DB) GetSkillVersion(ctx context.Context, caller Caller, id string, n int) (SkillVersion, error) {
	s, err := db.getSkill(ctx, db.pool, caller, PermSkillRead, id, false)
	if err != nil {
		return SkillVersion{}, fmt.Errorf("store: get skill version: %w", err)
	}
	v, err := skillVersion(ctx, db.pool, s, n)
	if err != nil {
		return SkillVersion{}, fmt.Errorf("store: get skill version: %w", err)
	}
	return v, nil
}

func skillVersion(ctx context.Context, q Querier, s Skill, n int) (SkillVersion, error) {
	v, err := scanSkillVersion(q.QueryRow(ctx, `SELECT `+skillVersionColumns+`
		FROM skill_versions WHERE skill_id = $1 AND version = $2`, s.ID, n))
	if errors.Is(err, pgx.ErrNoRows) {
		return SkillVersion{}, Errorf(CodeNotFound, "skill %q has no version %d (latest is %d)", s.Name, n, s.LatestVersion)
	}
	v.Name = s.Name
	return v, err
}
