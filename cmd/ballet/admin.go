package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/balletplanner/ballet/store"
)

// openStore loads the configuration and opens Postgres for commands that
// need no Redis, migrating when database.migrate is set.
func openStore(ctx context.Context, path string) (*store.DB, Config, error) {
	cfg, err := LoadConfig(configPath(path), os.Environ())
	if err != nil {
		return nil, Config{}, err
	}
	db, err := store.Open(ctx, cfg.Database)
	if err != nil {
		return nil, Config{}, err
	}
	if cfg.Database.Migrate {
		if _, err := db.Migrate(ctx); err != nil {
			db.Close()
			return nil, Config{}, err
		}
	}
	return db, cfg, nil
}

func newMigrateCmd() *cobra.Command {
	sub := func(action, short, long string) *cobra.Command {
		var path string
		c := &cobra.Command{
			Use:   action,
			Short: short,
			Long:  long,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return runMigrate(cmd.Context(), action, path, cmd.OutOrStdout())
			},
		}
		addConfigFlag(c, &path)
		return c
	}
	return newGroupCmd("migrate", "apply, show or check database migrations (up | status | check)",
		sub("up", "apply the pending migrations", "Applies the pending migrations of database.url under an advisory lock; a no-op when current."),
		sub("status", "list every migration and whether it is applied", "Lists every migration of this binary, applied or pending."),
		sub("check", "exit 0 when the schema is current, 1 naming both versions otherwise",
			"Reads the schema version without locking or creating anything: exit 0 when it\n"+
				"matches this binary, 1 with both versions while migrations are pending or when\n"+
				"the database is ahead of this binary."))
}

// runMigrate is `ballet migrate up|status|check`.
func runMigrate(ctx context.Context, action, path string, out io.Writer) error {
	cfg, err := LoadConfig(configPath(path), os.Environ())
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, cfg.Database)
	if err != nil {
		return err
	}
	defer db.Close()
	switch action {
	case "check":
		return migrateCheck(ctx, db, out)
	case "up":
		n, err := db.Migrate(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			fmt.Fprintln(out, "migrate: up to date, nothing to apply")
		} else {
			fmt.Fprintf(out, "migrate: applied %d migration(s)\n", n)
		}
		return nil
	}
	st, err := db.MigrationStatuses(ctx)
	if err != nil {
		return err
	}
	for _, s := range st {
		state := "pending"
		if s.Applied {
			state = "applied"
		}
		fmt.Fprintf(out, "%05d  %-8s %s\n", s.Version, state, s.Name)
	}
	return nil
}

// migrateCheck prints that the schema is current and returns nil, or
// returns an error (exit status 1) naming both versions while migrations
// are pending or when the database is ahead of this binary. It only reads:
// it neither locks nor creates the version table.
func migrateCheck(ctx context.Context, db *store.DB, out io.Writer) error {
	s, err := db.SchemaStatus(ctx)
	if err != nil {
		return fmt.Errorf("migrate check: %w", err)
	}
	if se := store.AsError(s.Err()); se != nil {
		if s.Behind() {
			return fmt.Errorf("migrate check: %d migration(s) pending: %s", len(s.Pending), se.Message)
		}
		return fmt.Errorf("migrate check: %s", se.Message)
	}
	fmt.Fprintf(out, "migrate check: schema current at version %d\n", s.Current)
	return nil
}

// adminOptions are the flags of `ballet admin <what> create`.
type adminOptions struct {
	config, key, name, org, project, subject, role string
	asJSON                                         bool
	ttl                                            time.Duration
}

func newAdminCmd() *cobra.Command {
	create := func(what, short string, flags func(fs *pflag.FlagSet, o *adminOptions)) *cobra.Command {
		var o adminOptions
		c := &cobra.Command{
			Use:   "create",
			Short: short,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return runAdminCreate(cmd.Context(), what, o, cmd.OutOrStdout())
			},
		}
		addConfigFlag(c, &o.config)
		c.Flags().BoolVar(&o.asJSON, "json", false, "print the result as one JSON object")
		flags(c.Flags(), &o)
		return c
	}
	org := newGroupCmd("org", "organizations: create", create("org", "create an organization",
		func(fs *pflag.FlagSet, o *adminOptions) {
			fs.StringVar(&o.key, "key", "", "`KEY` of the organization")
			fs.StringVar(&o.name, "name", "", "name of the organization")
		}))
	org.Aliases = []string{"organization"}
	org.Commands()[0].Example = "  ballet admin org create --key acme --name Acme"
	project := newGroupCmd("project", "projects: create", create("project", "create a project of an organization",
		func(fs *pflag.FlagSet, o *adminOptions) {
			fs.StringVar(&o.org, "org", "", "`KEY` of the organization the project belongs to")
			fs.StringVar(&o.key, "key", "", "`KEY` of the project")
			fs.StringVar(&o.name, "name", "", "name of the project")
		}))
	project.Commands()[0].Example = "  ballet admin project create --org acme --key WEB --name Web"
	binding := newGroupCmd("role-binding", "role bindings: create", create("role-binding",
		"bind a subject to a role on the platform, an organization or a project",
		func(fs *pflag.FlagSet, o *adminOptions) {
			fs.StringVar(&o.subject, "subject", "", "subject (user id) the role is granted to")
			fs.StringVar(&o.role, "role", "", "`ROLE`: platform-admin, organization-admin, engineer, approver or viewer")
			fs.StringVar(&o.org, "org", "", "organization `KEY` (without it and --project: the platform)")
			fs.StringVar(&o.project, "project", "", "project `KEY` (scope the binding to one project)")
		}))
	binding.Commands()[0].Example = "  ballet admin role-binding create --subject 'oidc:https://id.example.com#alice' --role engineer --org acme"
	token := newGroupCmd("token", "API tokens: create", create("token", "create an API token for a subject and print it",
		func(fs *pflag.FlagSet, o *adminOptions) {
			fs.StringVar(&o.subject, "subject", "", "subject (user id) the token authenticates as (required)")
			fs.StringVar(&o.name, "name", "", "name of the token")
			fs.DurationVar(&o.ttl, "ttl", 0, "token lifetime, e.g. 720h; 0 means no expiry")
		}))
	token.Commands()[0].Example = "  ballet admin token create --subject demo@example.com --ttl 720h"
	c := newGroupCmd("admin", "create organizations, projects, role bindings and API tokens; scheduling and the backlog",
		org, project, binding, token, newAdminGatewayTokenCmd(), newAdminSchedulingCmd(), newAdminBacklogCmd())
	c.Long = "Creates organizations, projects, role bindings and API tokens in the configured\n" +
		"database (migrating first when database.migrate is set), mints gateway tokens,\n" +
		"sets scheduling weights and caps, and prints the planner's backlog.\n" +
		"Every command takes --config FILE and --json."
	return c
}

// runAdminCreate is `ballet admin <what> create`.
func runAdminCreate(ctx context.Context, what string, o adminOptions, out io.Writer) error {
	if what == "token" && o.subject == "" {
		return usageError{"admin token create: --subject is required"}
	}
	db, _, err := openStore(ctx, o.config)
	if err != nil {
		return err
	}
	defer db.Close()
	actor := store.SystemActor()
	var result any
	switch what {
	case "org":
		result, err = db.CreateOrganization(ctx, o.key, o.name, actor)
	case "project":
		var organization store.Organization
		if organization, err = db.OrganizationByKey(ctx, o.org); err == nil {
			result, err = db.CreateProject(ctx, organization.ID, o.key, o.name, actor)
		}
	case "role-binding":
		var scope store.Scope
		if scope, err = resolveScope(ctx, db, o.org, o.project); err == nil {
			result, err = db.CreateRoleBinding(ctx, o.subject, store.Role(o.role), scope, actor)
		}
	case "token":
		var secret string
		var tok store.APIToken
		if secret, tok, err = db.CreateAPIToken(ctx, o.subject, o.name, o.ttl); err == nil {
			result = map[string]any{"token": secret, "id": tok.ID, "subject": tok.Subject, "expires_at": tok.ExpiresAt}
		}
	}
	if err != nil {
		return fmt.Errorf("admin %s create: %w", what, err)
	}
	return printResult(out, o.asJSON, result)
}

func resolveScope(ctx context.Context, db *store.DB, org, project string) (store.Scope, error) {
	switch {
	case project != "":
		p, err := db.ProjectByKey(ctx, project)
		if err != nil {
			return store.Scope{}, err
		}
		return store.Scope{Kind: store.ScopeProject, OrganizationID: p.OrganizationID, ProjectID: p.ID}, nil
	case org != "":
		o, err := db.OrganizationByKey(ctx, org)
		if err != nil {
			return store.Scope{}, err
		}
		return store.Scope{Kind: store.ScopeOrganization, OrganizationID: o.ID}, nil
	}
	return store.Scope{Kind: store.ScopePlatform}, nil
}

func printResult(out io.Writer, asJSON bool, v any) error {
	enc := json.NewEncoder(out)
	if !asJSON {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}
