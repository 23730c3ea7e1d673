package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

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

func runMigrate(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("migrate", "migrate up|status|check [--config FILE]")
	path := fs.String("config", "", "TOML configuration file (default $BALLET_CONFIG)")
	if len(args) == 0 || (args[0] != "up" && args[0] != "status" && args[0] != "check") {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return usageError{"migrate: expected up, status or check"}
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := LoadConfig(configPath(*path), os.Environ())
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, cfg.Database)
	if err != nil {
		return err
	}
	defer db.Close()
	switch args[0] {
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

const adminSynopsis = `admin <what> create [flags]

  admin org create --key KEY --name NAME
  admin project create --org ORG --key KEY --name NAME
  admin role-binding create --subject S --role ROLE [--org ORG [--project KEY]]
  admin token create --subject S [--name N] [--ttl 720h]
  admin gateway-token --org KEY [--project KEY] (see admin gateway-token --help)

Every one takes --config FILE and --json.`

func runAdmin(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("admin", adminSynopsis)
	path := fs.String("config", "", "TOML configuration file (default $BALLET_CONFIG)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	key := fs.String("key", "", "key of the organization or project")
	name := fs.String("name", "", "name of the organization, project or token")
	org := fs.String("org", "", "organization key")
	project := fs.String("project", "", "project key")
	subject := fs.String("subject", "", "subject (user id)")
	role := fs.String("role", "", "role: platform-admin, organization-admin, engineer, approver or viewer")
	ttl := fs.Duration("ttl", 0, "token lifetime; 0 means no expiry")
	if len(args) > 0 && args[0] == "gateway-token" {
		return runAdminGatewayToken(ctx, args[1:], out)
	}
	if len(args) < 2 || args[1] != "create" {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return usageError{"admin: expected <org|project|role-binding|token> create"}
	}
	what := args[0]
	if err := parse(fs, args[2:]); err != nil {
		return err
	}
	db, _, err := openStore(ctx, *path)
	if err != nil {
		return err
	}
	defer db.Close()
	actor := store.SystemActor()
	var result any
	switch what {
	case "org", "organization":
		result, err = db.CreateOrganization(ctx, *key, *name, actor)
	case "project":
		var o store.Organization
		if o, err = db.OrganizationByKey(ctx, *org); err == nil {
			result, err = db.CreateProject(ctx, o.ID, *key, *name, actor)
		}
	case "role-binding":
		var scope store.Scope
		if scope, err = resolveScope(ctx, db, *org, *project); err == nil {
			result, err = db.CreateRoleBinding(ctx, *subject, store.Role(*role), scope, actor)
		}
	case "token":
		if *subject == "" {
			return usageError{"admin token create: --subject is required"}
		}
		var secret string
		var tok store.APIToken
		if secret, tok, err = db.CreateAPIToken(ctx, *subject, *name, *ttl); err == nil {
			result = map[string]any{"token": secret, "id": tok.ID, "subject": tok.Subject, "expires_at": tok.ExpiresAt}
		}
	default:
		return usageError{fmt.Sprintf("admin: unknown object %q", what)}
	}
	if err != nil {
		return fmt.Errorf("admin %s create: %w", what, err)
	}
	return printResult(out, *asJSON, result)
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
