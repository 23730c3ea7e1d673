package store

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// SkillPin fixes, follows or disables one skill name in a project. Version
// nil means disabled; 0 follows the latest version; N fixes version N.
type SkillPin struct {
	Project   string    `json:"project"`
	Name      string    `json:"name"`
	Version   *int      `json:"version"`
	Disabled  bool      `json:"disabled"`
	UpdatedBy string    `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SkillPinSpec is the body of a pin: exactly one of Version and Disabled.
type SkillPinSpec struct {
	Version  *int `json:"version"`
	Disabled bool `json:"disabled"`
}

// EffectiveSkill is one skill in force in a project (SPEC §5).
//
// Version is the pin in force: N when pinned to an existing version N, 0
// when following the latest version (no pin, a pin to 0, or a pin that
// cannot be honoured, in which case Problem says why). ResolvedVersion is
// the version whose body applies: Version, or LatestVersion when Version is
// 0; it is 0 only for a pin to an unknown name, which has no body.
type EffectiveSkill struct {
	Name            string `json:"name"`
	SkillID         string `json:"skill_id,omitempty"`
	Scope           string `json:"scope,omitempty"`
	Description     string `json:"description"`
	Version         int    `json:"version"`
	LatestVersion   int    `json:"latest_version"`
	ResolvedVersion int    `json:"resolved_version"`
	// Pinned is the pin's stored version, when the project pins the name.
	Pinned  *int   `json:"pinned,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// ResolvedSkill is an effective skill with the body of its resolved version.
type ResolvedSkill struct {
	EffectiveSkill
	Body string `json:"body"`
}

var scopeRank = map[string]int{ScopePlatform: 0, ScopeOrganization: 1, ScopeProject: 2}

// ProjectSkills lists the project's effective skills by name (skill.read on
// the project): for each name the most specific published skill, with the
// project's pins applied; a pin to an unknown version or name is listed with
// a problem and version 0.
func (db *DB) ProjectSkills(ctx context.Context, caller Caller, projectKey string) ([]EffectiveSkill, error) {
	p, err := db.kbProject(ctx, caller, PermSkillRead, projectKey)
	if err != nil {
		return nil, fmt.Errorf("store: project skills: %w", err)
	}
	out, err := effectiveSkills(ctx, db.pool, p)
	if err != nil {
		return nil, fmt.Errorf("store: project skills: %w", err)
	}
	return out, nil
}

func effectiveSkills(ctx context.Context, q Querier, p Project) ([]EffectiveSkill, error) {
	rows, err := q.Query(ctx, `SELECT `+skillColumns+skillFrom+`
		WHERE s.latest_version > 0 AND (s.scope_kind = 'platform'
		   OR (s.scope_kind = 'organization' AND s.organization_id = $1)
		   OR (s.scope_kind = 'project' AND s.project_id = $2))`, p.OrganizationID, p.ID)
	if err != nil {
		return nil, err
	}
	skills, err := collect(rows, scanSkill)
	if err != nil {
		return nil, err
	}
	byName := map[string]Skill{}
	for _, s := range skills {
		if cur, ok := byName[s.Name]; !ok || scopeRank[s.ScopeKind] > scopeRank[cur.ScopeKind] {
			byName[s.Name] = s
		}
	}
	pins, err := projectPins(ctx, q, p)
	if err != nil {
		return nil, err
	}
	eff := map[string]EffectiveSkill{}
	for name, s := range byName {
		eff[name] = EffectiveSkill{Name: name, SkillID: s.ID, Scope: s.Scope, Description: s.Description,
			LatestVersion: s.LatestVersion, ResolvedVersion: s.LatestVersion}
	}
	for _, pin := range pins {
		e, known := eff[pin.Name]
		switch {
		case pin.Disabled:
			delete(eff, pin.Name)
			continue
		case !known:
			e = EffectiveSkill{Name: pin.Name, Problem: fmt.Sprintf("pinned skill %q does not exist or was never published", pin.Name)}
		case *pin.Version > e.LatestVersion:
			e.Problem = fmt.Sprintf("pinned version %d of %q does not exist (latest is %d); following the latest version",
				*pin.Version, pin.Name, e.LatestVersion)
		case *pin.Version > 0:
			e.Version, e.ResolvedVersion = *pin.Version, *pin.Version
		}
		e.Pinned = pin.Version
		eff[pin.Name] = e
	}
	out := make([]EffectiveSkill, 0, len(eff))
	for _, e := range eff {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ResolveSkill returns the body of the named skill as it applies in the
// project (skill.read on the project): the planner reads its "planner"
// skill through it. A disabled, unknown or never-published name is not
// found; a pin to an unknown version resolves to the latest, Problem set.
func (db *DB) ResolveSkill(ctx context.Context, caller Caller, projectKey, name string) (ResolvedSkill, error) {
	p, err := db.kbProject(ctx, caller, PermSkillRead, projectKey)
	if err != nil {
		return ResolvedSkill{}, fmt.Errorf("store: resolve skill: %w", err)
	}
	eff, err := effectiveSkills(ctx, db.pool, p)
	if err != nil {
		return ResolvedSkill{}, fmt.Errorf("store: resolve skill: %w", err)
	}
	for _, e := range eff {
		if e.Name != name {
			continue
		}
		if e.ResolvedVersion == 0 {
			return ResolvedSkill{}, fmt.Errorf("store: resolve skill: %w", &Error{Code: CodeNotFound,
				Message: fmt.Sprintf("skill %q is not available in project %s: %s", name, p.Key, e.Problem)})
		}
		r := ResolvedSkill{EffectiveSkill: e}
		err := db.pool.QueryRow(ctx, `SELECT body FROM skill_versions WHERE skill_id = $1 AND version = $2`,
			e.SkillID, e.ResolvedVersion).Scan(&r.Body)
		if err != nil {
			return ResolvedSkill{}, fmt.Errorf("store: resolve skill: %w", err)
		}
		return r, nil
	}
	return ResolvedSkill{}, fmt.Errorf("store: resolve skill: %w",
		Errorf(CodeNotFound, "skill %q is not available in project %s", name, p.Key))
}

// skillPinColumns are what scanSkillPin reads from skill_pins; a pin's
// Project is the key of its project, set by the caller.
const skillPinColumns = `name, version, disabled, updated_by, updated_at`

func scanSkillPin(row pgx.Row) (SkillPin, error) {
	var pin SkillPin
	err := row.Scan(&pin.Name, &pin.Version, &pin.Disabled, &pin.UpdatedBy, &pin.UpdatedAt)
	return pin, err
}

func projectPins(ctx context.Context, q Querier, p Project) ([]SkillPin, error) {
	rows, err := q.Query(ctx, `SELECT `+skillPinColumns+`
		FROM skill_pins WHERE project_id = $1 ORDER BY name`, p.ID)
	if err != nil {
		return nil, err
	}
	pins, err := collect(rows, scanSkillPin)
	for i := range pins {
		pins[i].Project = p.Key
	}
	return pins, err
}

// SkillPins lists the project's pins by name (skill.read on the project).
func (db *DB) SkillPins(ctx context.Context, caller Caller, projectKey string) ([]SkillPin, error) {
	p, err := db.kbProject(ctx, caller, PermSkillRead, projectKey)
	if err != nil {
		return nil, fmt.Errorf("store: skill pins: %w", err)
	}
	pins, err := projectPins(ctx, db.pool, p)
	if err != nil {
		return nil, fmt.Errorf("store: skill pins: %w", err)
	}
	return pins, nil
}

// PinSkill sets the project's pin of a skill name (skill.write on the
// project): {"version": N} fixes N (0 follows latest), {"disabled": true}
// removes the skill. A pin may name a version or skill that does not exist
// yet; the effective list then reports a problem.
func (db *DB) PinSkill(ctx context.Context, caller Caller, projectKey, name string, spec SkillPinSpec) (SkillPin, error) {
	if !ValidSkillName(name) {
		return SkillPin{}, fmt.Errorf("store: pin skill: %w",
			Errorf(CodeInvalid, "name: must be 2-64 characters of a-z, 0-9 and -, got %q", name))
	}
	switch {
	case spec.Disabled == (spec.Version != nil):
		return SkillPin{}, fmt.Errorf("store: pin skill: %w",
			Errorf(CodeInvalid, `give exactly one of {"version": N} and {"disabled": true}`))
	case spec.Version != nil && (*spec.Version < 0 || *spec.Version > math.MaxInt32):
		return SkillPin{}, fmt.Errorf("store: pin skill: %w",
			Errorf(CodeInvalid, "version: must be 0 (follow latest) or a published version number, got %d", *spec.Version))
	}
	p, err := db.kbProject(ctx, caller, PermSkillWrite, projectKey)
	if err != nil {
		return SkillPin{}, fmt.Errorf("store: pin skill: %w", err)
	}
	pin := SkillPin{Project: p.Key, Name: name, Version: spec.Version, Disabled: spec.Disabled, UpdatedBy: humanOf(caller)}
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `
			INSERT INTO skill_pins (project_id, name, version, disabled, updated_by) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (project_id, name) DO UPDATE
			SET version = EXCLUDED.version, disabled = EXCLUDED.disabled, updated_by = EXCLUDED.updated_by, updated_at = now()
			RETURNING updated_at`, p.ID, name, spec.Version, spec.Disabled, pin.UpdatedBy).Scan(&pin.UpdatedAt); err != nil {
			return err
		}
		_, err := AppendEvent(ctx, tx, Event{OrganizationID: p.OrganizationID, ProjectID: p.ID, Type: "skill.pinned",
			EntityType: "skill_pin", EntityID: p.ID + "/" + name, EntityKey: name, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"name": name, "version": spec.Version, "disabled": spec.Disabled})})
		return err
	})
	if err != nil {
		return SkillPin{}, fmt.Errorf("store: pin skill: %w", err)
	}
	return pin, nil
}

// UnpinSkill removes the project's pin of a name, so that it follows the
// latest version again (skill.write on the project).
func (db *DB) UnpinSkill(ctx context.Context, caller Caller, projectKey, name string) error {
	p, err := db.kbProject(ctx, caller, PermSkillWrite, projectKey)
	if err != nil {
		return fmt.Errorf("store: unpin skill: %w", err)
	}
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM skill_pins WHERE project_id = $1 AND name = $2`, p.ID, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return Errorf(CodeNotFound, "project %s has no pin for skill %q", p.Key, name)
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: p.OrganizationID, ProjectID: p.ID, Type: "skill.unpinned",
			EntityType: "skill_pin", EntityID: p.ID + "/" + name, EntityKey: name, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"name": name})})
		return err
	})
	if err != nil {
		return fmt.Errorf("store: unpin skill: %w", err)
	}
	return nil
}
