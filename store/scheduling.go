package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Weights and caps of fair scheduling (migration 00106), as admins read and
// set them. An organization's are a platform admin's to set, a project's
// an organization admin's (project.update). A change tells the dispatcher,
// in its transaction, to read them again.

// Bounds of SchedulingSettings.
const (
	MinSchedulingWeight = 1
	MaxSchedulingWeight = 1000
	// MaxSchedulingCap bounds every cap; 0 is no cap, nil the default.
	MaxSchedulingCap = 100000
)

const (
	organizationSchedulingRead = `SELECT scheduling_weight, max_running_turns, max_running_turns_per_human, max_queued_turns
		FROM organizations WHERE id = $1`
	organizationSchedulingLock  = organizationSchedulingRead + ` FOR UPDATE`
	organizationSchedulingWrite = `UPDATE organizations SET scheduling_weight = $2, max_running_turns = $3,
			max_running_turns_per_human = $4, max_queued_turns = $5, updated_at = now()
		WHERE id = $1
		RETURNING scheduling_weight, max_running_turns, max_running_turns_per_human, max_queued_turns`
	projectSchedulingRead = `SELECT scheduling_weight, max_running_turns, max_running_turns_per_human
		FROM projects WHERE id = $1`
	projectSchedulingLock  = projectSchedulingRead + ` FOR UPDATE`
	projectSchedulingWrite = `UPDATE projects SET scheduling_weight = $2, max_running_turns = $3,
			max_running_turns_per_human = $4, updated_at = now()
		WHERE id = $1
		RETURNING scheduling_weight, max_running_turns, max_running_turns_per_human`
)

func scanOrganizationScheduling(row pgx.Row) (SchedulingSettings, error) {
	var s SchedulingSettings
	err := row.Scan(&s.Weight, &s.MaxRunningTurns, &s.MaxRunningTurnsPerHuman, &s.MaxQueuedTurns)
	return s, err
}

func scanProjectScheduling(row pgx.Row) (SchedulingSettings, error) {
	var s SchedulingSettings
	err := row.Scan(&s.Weight, &s.MaxRunningTurns, &s.MaxRunningTurnsPerHuman)
	return s, err
}

// OrganizationScheduling reads an organization's weight and caps
// (organization.read, at the organization or one of its projects). One the
// caller cannot see is not found.
func (db *DB) OrganizationScheduling(ctx context.Context, caller Caller, orgKey string) (SchedulingSettings, error) {
	o, err := db.OrganizationByKey(ctx, orgKey)
	if err == nil {
		err = caller.Principal.AuthorizeInOrganization(PermOrganizationRead, o.ID)
	}
	if IsCode(err, CodeNotFound) {
		err = Errorf(CodeNotFound, "organization %q not found", orgKey)
	}
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: organization scheduling: %w", err)
	}
	s, err := scanOrganizationScheduling(db.pool.QueryRow(ctx, organizationSchedulingRead, o.ID))
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: organization scheduling: %w", notFound(err, "organization %q", orgKey))
	}
	return s, nil
}

// SetOrganizationScheduling replaces an organization's weight and caps,
// records organization.updated and tells the dispatcher, all in one
// transaction; it returns what is stored. Only a platform admin may: anyone
// else who sees the organization is forbidden, and one the caller cannot
// see is not found.
func (db *DB) SetOrganizationScheduling(ctx context.Context, caller Caller, orgKey string, s SchedulingSettings) (SchedulingSettings, error) {
	o, err := db.OrganizationByKey(ctx, orgKey)
	if err == nil && !caller.Principal.SeesOrganization(o.ID) {
		err = Errorf(CodeNotFound, "not found")
	}
	if IsCode(err, CodeNotFound) {
		err = Errorf(CodeNotFound, "organization %q not found", orgKey)
	}
	if err == nil {
		err = authorizePlatformAdmin(caller, "change an organization's scheduling")
	}
	if err == nil {
		err = s.validate(false)
	}
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: set organization scheduling: %w", err)
	}
	var out SchedulingSettings
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		previous, err := scanOrganizationScheduling(tx.QueryRow(ctx, organizationSchedulingLock, o.ID))
		if err != nil {
			return notFound(err, "organization %q", orgKey)
		}
		out, err = scanOrganizationScheduling(tx.QueryRow(ctx, organizationSchedulingWrite, o.ID,
			s.Weight, s.MaxRunningTurns, s.MaxRunningTurnsPerHuman, s.MaxQueuedTurns))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, notifySettingsChanged); err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: o.ID, Type: "organization.updated",
			EntityType: "organization", EntityID: o.ID, EntityKey: o.Key, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"scheduling": out, "previous": map[string]any{"scheduling": previous}})})
		return err
	})
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: set organization scheduling: %w", err)
	}
	return out, nil
}

// ProjectScheduling reads a project's weight and caps (project.read). One
// the caller cannot see is not found.
func (db *DB) ProjectScheduling(ctx context.Context, caller Caller, projectKey string) (SchedulingSettings, error) {
	p, err := db.kbProject(ctx, caller, PermProjectRead, projectKey)
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: project scheduling: %w", err)
	}
	s, err := scanProjectScheduling(db.pool.QueryRow(ctx, projectSchedulingRead, p.ID))
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: project scheduling: %w", notFound(err, "project %q", projectKey))
	}
	return s, nil
}

// SetProjectScheduling replaces a project's weight and caps (project.update:
// an organization admin or a platform admin), records project.updated and
// tells the dispatcher, all in one transaction; it returns what is stored.
// A project has no cap of queued turns: MaxQueuedTurns must be nil.
func (db *DB) SetProjectScheduling(ctx context.Context, caller Caller, projectKey string, s SchedulingSettings) (SchedulingSettings, error) {
	p, err := db.kbProject(ctx, caller, PermProjectUpdate, projectKey)
	if err == nil {
		err = s.validate(true)
	}
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: set project scheduling: %w", err)
	}
	var out SchedulingSettings
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		previous, err := scanProjectScheduling(tx.QueryRow(ctx, projectSchedulingLock, p.ID))
		if err != nil {
			return notFound(err, "project %q", projectKey)
		}
		out, err = scanProjectScheduling(tx.QueryRow(ctx, projectSchedulingWrite, p.ID,
			s.Weight, s.MaxRunningTurns, s.MaxRunningTurnsPerHuman))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, notifySettingsChanged); err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: p.OrganizationID, ProjectID: p.ID,
			Type: "project.updated", EntityType: "project", EntityID: p.ID, EntityKey: p.Key, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"changes": map[string]any{"scheduling": out},
				"previous": map[string]any{"scheduling": previous}})})
		return err
	})
	if err != nil {
		return SchedulingSettings{}, fmt.Errorf("store: set project scheduling: %w", err)
	}
	return out, nil
}

// validate checks every field, naming the first that is wrong. A
// project's settings have no max_queued_turns.
func (s SchedulingSettings) validate(project bool) error {
	if s.Weight < MinSchedulingWeight || s.Weight > MaxSchedulingWeight {
		return Errorf(CodeInvalid, "weight: must be %d-%d, got %d", MinSchedulingWeight, MaxSchedulingWeight, s.Weight)
	}
	if project && s.MaxQueuedTurns != nil {
		return Errorf(CodeInvalid, "max_queued_turns: a project has no cap of queued turns; set it on the organization")
	}
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"max_running_turns", s.MaxRunningTurns},
		{"max_running_turns_per_human", s.MaxRunningTurnsPerHuman},
		{"max_queued_turns", s.MaxQueuedTurns},
	} {
		if f.v != nil && (*f.v < 0 || *f.v > MaxSchedulingCap) {
			return Errorf(CodeInvalid, "%s: must be 0 (no cap) to %d, or null (the default), got %d", f.name, MaxSchedulingCap, *f.v)
		}
	}
	return nil
}

// authorizePlatformAdmin lets through a caller bound at platform scope to
// a role holding organization.create (platform-admin, the one such role),
// as creating an organization does; what refuses anyone else.
func authorizePlatformAdmin(caller Caller, what string) error {
	if caller.Principal.Can(PermOrganizationCreate, "", "") {
		return nil
	}
	return &Error{Code: CodeForbidden, Message: fmt.Sprintf("%s may not %s (needs %s)", subjectOf(caller), what, RolePlatformAdmin),
		Details: map[string]any{"role": string(RolePlatformAdmin)}}
}
