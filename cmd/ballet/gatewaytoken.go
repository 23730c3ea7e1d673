package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
)

const gatewayTokenSynopsis = `admin gateway-token --org KEY [--project KEY] [--session ID] [--subject S] [--acting-for S] [--ttl 10m] [--json]

Mints a short-lived gateway token (audience gateway, capability llm.invoke)
for trying the gateway by hand, signed with gateway.signing_key:

  curl -H "Authorization: Bearer $(ballet admin gateway-token --org demo --project DEMO)" \
       -H 'content-type: application/json' http://localhost:8082/v1/messages -d @request.json`

// runAdminGatewayToken is `ballet admin gateway-token`.
func runAdminGatewayToken(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("admin gateway-token", gatewayTokenSynopsis)
	path := fs.String("config", "", "TOML configuration file (default $BALLET_CONFIG)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object instead of the bare token")
	org := fs.String("org", "", "organization key (required)")
	project := fs.String("project", "", "project key; empty for a call made for the organization as a whole")
	session := fs.String("session", "", "planner session id the calls belong to")
	subject := fs.String("subject", "", "the caller (default planner:<session>, or admin without --session)")
	actingFor := fs.String("acting-for", "", "the human subject the calls are made for")
	ttl := fs.Duration("ttl", 0, "token lifetime (default gateway.token_ttl)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Sprintf("admin gateway-token: unexpected argument %q", fs.Arg(0))}
	case *org == "":
		return usageError{"admin gateway-token: --org is required"}
	case *ttl < 0:
		return usageError{fmt.Sprintf("admin gateway-token: --ttl must be positive, got %s", *ttl)}
	}
	db, cfg, err := openStore(ctx, *path)
	if err != nil {
		return err
	}
	defer db.Close()
	if cfg.Gateway.SigningKey == "" {
		return errors.New("admin gateway-token: gateway.signing_key is not set (set it in the config file or " +
			"BALLET_GATEWAY_SIGNING_KEY to the key the gateway verifies tokens with)")
	}
	if *ttl == 0 {
		*ttl = cfg.Gateway.TokenTTL
	}
	o, err := db.OrganizationByKey(ctx, *org)
	if err != nil {
		return fmt.Errorf("admin gateway-token: %w", err)
	}
	p := llm.Principal{Subject: *subject, Organization: o.ID, Session: *session, ActingFor: *actingFor}
	projectKey := ""
	if *project != "" {
		pr, err := db.ProjectByKey(ctx, *project)
		if err != nil {
			return fmt.Errorf("admin gateway-token: %w", err)
		}
		if pr.OrganizationID != o.ID {
			return fmt.Errorf("admin gateway-token: project %s is not in organization %s", pr.Key, o.Key)
		}
		p.Project, projectKey = pr.ID, pr.Key
	}
	if p.Subject == "" && p.Session == "" {
		p.Subject = "admin"
	}
	expires := time.Now().Add(*ttl).UTC().Truncate(time.Second)
	token, err := llm.Mint([]byte(cfg.Gateway.SigningKey), p, *ttl)
	if err != nil {
		return fmt.Errorf("admin gateway-token: %w", err)
	}
	if !*asJSON {
		_, err := fmt.Fprintln(out, token)
		return err
	}
	return printResult(out, true, map[string]any{
		"token": token, "organization": o.Key, "project": projectKey, "session": *session,
		"acting_for": *actingFor, "expires_at": expires,
	})
}
