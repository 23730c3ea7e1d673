package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/store"
)

// demoResult is what `ballet demo --json` prints.
type demoResult struct {
	Organization string `json:"organization"`
	Project      string `json:"project"`
	Subject      string `json:"subject"`
	Token        string `json:"token"`
}

func newDemoCmd() *cobra.Command {
	var path string
	var asJSON bool
	c := &cobra.Command{
		Use:   "demo",
		Short: "create the demo organization, project and token (idempotent)",
		Long: "Creates, when missing, the demo organization (demo), the project DEMO with\n" +
			"milestones, epics, tickets and dependencies, a published planner skill, a\n" +
			"few knowledge entries and the human demo@example.com bound as engineer on\n" +
			"DEMO; then prints a new API token for that human. Running it again creates\n" +
			"nothing new but the token.",
		Example: "  ballet demo --config ballet.toml --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), path, asJSON, cmd.OutOrStdout())
		},
	}
	addConfigFlag(c, &path)
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	return c
}

// runDemo is `ballet demo`.
func runDemo(ctx context.Context, path string, asJSON bool, out io.Writer) error {
	db, _, err := openStore(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	created, err := seedDemo(ctx, db)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	secret, _, err := db.CreateAPIToken(ctx, demoSubject, "demo", demoTokenTTL)
	if err != nil {
		return fmt.Errorf("demo: token: %w", err)
	}
	res := demoResult{Organization: demoOrgKey, Project: demoProjectKey, Subject: demoSubject, Token: secret}
	if asJSON {
		return printResult(out, true, res)
	}
	if created == 0 {
		fmt.Fprintln(out, "demo: already in place; nothing created")
	} else {
		fmt.Fprintf(out, "demo: created %d record(s)\n", created)
	}
	fmt.Fprintf(out, "organization: %s\nproject:      %s\nsubject:      %s\ntoken:        %s\n",
		res.Organization, res.Project, res.Subject, res.Token)
	return nil
}

// demoSeeder creates what is missing of the demo, never touching what
// exists: an item a human moved or renamed stays as it is.
type demoSeeder struct {
	db      *store.DB
	caller  store.Caller
	org     store.Organization
	project store.Project
	keys    map[string]string // demo ref → item key
	fresh   map[string]bool   // refs created by this run
	created int
}

// seedCaller is the system, acting with platform-admin: its writes are
// recorded as the system's events.
func seedCaller() store.Caller {
	p := &store.Principal{Subject: "system", Kind: store.ActorSystem, Bindings: []store.RoleBinding{{
		Subject: "system", Role: store.RolePlatformAdmin, Scope: store.Scope{Kind: store.ScopePlatform},
	}}}
	return store.Caller{Principal: p, Actor: store.SystemActor()}
}

// seedDemo creates the missing parts of the demo and reports how many
// records it created. Concurrent runs take turns on an advisory lock.
func seedDemo(ctx context.Context, db *store.DB) (int, error) {
	conn, err := db.Pool().Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	const lock = `hashtextextended('ballet.demo', 0)`
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+lock+`)`); err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+lock+`)`) //nolint:errcheck // the lock ends with the session anyway

	s := &demoSeeder{db: db, caller: seedCaller(), keys: map[string]string{}, fresh: map[string]bool{}}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"organization", s.organization}, {"project", s.projectStep}, {"human", s.human},
		{"items", s.items}, {"dependencies", s.dependencies}, {"skill", s.skill}, {"knowledge", s.knowledge},
	}
	for _, st := range steps {
		if err := st.fn(ctx); err != nil {
			return s.created, fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return s.created, nil
}

func (s *demoSeeder) organization(ctx context.Context) error {
	o, err := s.db.OrganizationByKey(ctx, demoOrgKey)
	if store.IsCode(err, store.CodeNotFound) {
		o, err = s.db.CreateOrganization(ctx, demoOrgKey, demoOrgName, s.caller.Actor)
		s.created++
	}
	s.org = o
	return err
}

func (s *demoSeeder) projectStep(ctx context.Context) error {
	p, err := s.db.ProjectByKey(ctx, demoProjectKey)
	switch {
	case store.IsCode(err, store.CodeNotFound):
		if p, err = s.db.CreateProject(ctx, s.org.ID, demoProjectKey, demoProjectName, s.caller.Actor); err != nil {
			return err
		}
		s.created++
		desc := demoProjectDescription
		p, err = s.db.UpdateProject(ctx, p.ID, store.ProjectUpdate{Description: &desc}, s.caller.Actor)
	case err == nil && p.OrganizationID != s.org.ID:
		return fmt.Errorf("project %s exists in another organization; the demo needs that key", demoProjectKey)
	}
	s.project = p
	return err
}

func (s *demoSeeder) human(ctx context.Context) error {
	if _, err := s.db.EnsureSubject(ctx, store.Subject{ID: demoSubject, Kind: store.ActorHuman,
		DisplayName: "Demo Engineer", Email: demoSubject}); err != nil {
		return err
	}
	scope := store.Scope{Kind: store.ScopeProject, OrganizationID: s.org.ID, ProjectID: s.project.ID}
	bindings, err := s.db.ListRoleBindings(ctx, scope)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(bindings, func(b store.RoleBinding) bool {
		return b.Subject == demoSubject && b.Role == store.RoleEngineer
	}) {
		return nil
	}
	_, err = s.db.CreateRoleBinding(ctx, demoSubject, store.RoleEngineer, scope, s.caller.Actor)
	s.created++
	return err
}

// items creates the demo items missing by title and moves each new ticket
// to its demo state.
func (s *demoSeeder) items(ctx context.Context) error {
	existing, err := s.db.ListItems(ctx, s.caller, demoProjectKey, store.ItemFilter{})
	if err != nil {
		return err
	}
	byTitle := map[string]store.Item{}
	for _, it := range existing {
		if _, seen := byTitle[it.Title]; !seen {
			byTitle[it.Title] = it
		}
	}
	for _, d := range demoItems {
		if it, ok := byTitle[d.title]; ok {
			s.keys[d.ref] = it.Key
			continue
		}
		it, err := s.db.CreateItem(ctx, s.caller, demoProjectKey, store.NewItem{
			Kind: d.kind, Title: d.title, Description: d.description, Type: d.typ,
			AcceptanceCriteria: d.criteria, Epic: s.keys[d.epic], Milestone: s.keys[d.milestone],
		})
		if err != nil {
			return fmt.Errorf("%q: %w", d.title, err)
		}
		s.created++
		s.keys[d.ref], s.fresh[d.ref] = it.Key, true
		if err := s.moveTo(ctx, it, d.state); err != nil {
			return fmt.Errorf("%s to %s: %w", it.Key, d.state, err)
		}
	}
	return nil
}

// moveTo walks a new ticket from backlog to state through the human
// transitions. in_progress is reached only by running work, which the demo
// has none of: it sets that state directly, recording the same event a
// transition would, as the system.
func (s *demoSeeder) moveTo(ctx context.Context, it store.Item, state string) error {
	var path []string
	switch state {
	case "", it.State:
		return nil
	case store.StateReady, store.StateDone, store.StateCancelled:
		path = []string{state}
	case store.StatePaused:
		path = []string{store.StateReady, store.StatePaused}
	case store.StateInProgress:
		path = []string{store.StateReady}
	default:
		return fmt.Errorf("no path to %s", state)
	}
	for _, to := range path {
		var err error
		if it, err = s.db.TransitionItem(ctx, s.caller, it.Key, to, it.Version); err != nil {
			return err
		}
	}
	if state != store.StateInProgress {
		return nil
	}
	return s.db.Tx(ctx, func(tx pgx.Tx) error {
		var version int64
		if err := tx.QueryRow(ctx, `UPDATE items SET state = 'in_progress', version = version + 1, updated_at = now()
			WHERE id = $1 AND state = 'ready' RETURNING version`, it.ID).Scan(&version); err != nil {
			return err
		}
		_, err := store.AppendEvent(ctx, tx, store.Event{OrganizationID: it.OrganizationID, ProjectID: it.ProjectID,
			Type: "item.state_changed", EntityType: "item", EntityID: it.ID, EntityKey: it.Key, Actor: s.caller.Actor,
			Payload: store.MustJSON(map[string]any{"key": it.Key, "from": it.State, "to": store.StateInProgress, "version": version})})
		return err
	})
}

// dependencies adds the demo edges that touch an item created by this run.
func (s *demoSeeder) dependencies(ctx context.Context) error {
	for _, d := range demoDependencies {
		if !s.fresh[d.from] && !s.fresh[d.to] {
			continue
		}
		from, to := s.keys[d.from], s.keys[d.to]
		if _, err := s.db.AddDependency(ctx, s.caller, from, to, d.typ); err != nil {
			return fmt.Errorf("%s %s %s: %w", from, d.typ, to, err)
		}
		s.created++
	}
	return nil
}

func (s *demoSeeder) skill(ctx context.Context) error {
	scope := store.ScopeOrganization + ":" + demoOrgKey
	skills, err := s.db.ListSkills(ctx, s.caller, scope)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(skills, func(sk store.Skill) bool { return sk.Name == demoSkillName })
	var sk store.Skill
	if i >= 0 {
		sk = skills[i]
	} else {
		if sk, err = s.db.CreateSkill(ctx, s.caller, store.NewSkill{Name: demoSkillName, Scope: scope,
			Description: demoSkillDescription, Draft: demoSkillBody}); err != nil {
			return err
		}
		s.created++
	}
	if sk.LatestVersion > 0 {
		return nil
	}
	_, err = s.db.PublishSkill(ctx, s.caller, sk.ID)
	s.created++
	return err
}

func (s *demoSeeder) knowledge(ctx context.Context) error {
	existing, err := s.db.ListKnowledge(ctx, s.caller, demoOrgKey, store.KnowledgeFilter{Limit: 200})
	if err != nil {
		return err
	}
	for _, k := range demoKnowledgeEntries {
		if slices.ContainsFunc(existing, func(e store.KnowledgeEntry) bool { return e.Title == k.title }) {
			continue
		}
		var items []string
		for _, ref := range k.items {
			items = append(items, s.keys[ref])
		}
		if _, err := s.db.CreateKnowledge(ctx, s.caller, demoOrgKey, store.NewKnowledge{Kind: k.kind, Title: k.title,
			Body: k.body, Projects: []string{demoProjectKey}, Items: items}); err != nil {
			return fmt.Errorf("%q: %w", k.title, err)
		}
		s.created++
	}
	return nil
}
