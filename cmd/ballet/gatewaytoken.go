package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/gateway/llm"
)

// gatewayTokenOptions are the flags of `ballet admin gateway-token`.
type gatewayTokenOptions struct {
	config, org, project, session, subject, actingFor string
	asJSON                                            bool
	ttl                                               time.Duration
}

func newAdminGatewayTokenCmd() *cobra.Command {
	var o gatewayTokenOptions
	c := &cobra.Command{
		Use:   "gateway-token",
		Short: "mint a short-lived gateway token for trying the gateway by hand",
		Long: "Mints a short-lived gateway token (audience gateway, capability llm.invoke)\n" +
			"for trying the gateway by hand, signed with gateway.signing_key.",
		Example: `  curl -H "Authorization: Bearer $(ballet admin gateway-token --org demo --project DEMO)" \
       -H 'content-type: application/json' http://localhost:8082/v1/messages -d @request.json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAdminGatewayToken(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	fs := c.Flags()
	addConfigFlag(c, &o.config)
	fs.BoolVar(&o.asJSON, "json", false, "print the result as one JSON object instead of the bare token")
	fs.StringVar(&o.org, "org", "", "organization `KEY` (required)")
	fs.StringVar(&o.project, "project", "", "project `KEY`; empty for a call made for the organization as a whole")
	fs.StringVar(&o.session, "session", "", "planner session `ID` the calls belong to")
	fs.StringVar(&o.subject, "subject", "", "the caller (default planner:<session>, or admin without --session)")
	fs.StringVar(&o.actingFor, "acting-for", "", "the human subject the calls are made for")
	fs.DurationVar(&o.ttl, "ttl", 0, "token lifetime, e.g. 10m, at most 24h (default gateway.token_ttl)")
	return c
}

// runAdminGatewayToken is `ballet admin gateway-token`.
func runAdminGatewayToken(ctx context.Context, o gatewayTokenOptions, out io.Writer) error {
	switch {
	case o.org == "":
		return usageError{"admin gateway-token: --org is required"}
	case o.ttl < 0 || o.ttl > llm.MaxTokenTTL:
		return usageError{fmt.Sprintf("admin gateway-token: --ttl must be positive and at most %s, got %s", llm.MaxTokenTTL, o.ttl)}
	}
	db, cfg, err := openStore(ctx, o.config)
	if err != nil {
		return err
	}
	defer db.Close()
	if cfg.Gateway.SigningKey == "" {
		return errors.New("admin gateway-token: gateway.signing_key is not set (set it in the config file or " +
			"BALLET_GATEWAY_SIGNING_KEY to the key the gateway verifies tokens with)")
	}
	if o.ttl == 0 {
		o.ttl = cfg.Gateway.TokenTTL
	}
	org, err := db.OrganizationByKey(ctx, o.org)
	if err != nil {
		return fmt.Errorf("admin gateway-token: %w", err)
	}
	p := llm.Principal{Subject: o.subject, Organization: org.ID, Session: o.session, ActingFor: o.actingFor}
	projectKey := ""
	if o.project != "" {
		pr, err := db.ProjectByKey(ctx, o.project)
		if err != nil {
			return fmt.Errorf("admin gateway-token: %w", err)
		}
		if pr.OrganizationID != org.ID {
			return fmt.Errorf("admin gateway-token: project %s is not in organization %s", pr.Key, org.Key)
		}
		p.Project, projectKey = pr.ID, pr.Key
	}
	if p.Subject == "" && p.Session == "" {
		p.Subject = "admin"
	}
	expires := time.Now().Add(o.ttl).UTC().Truncate(time.Second)
	token, err := llm.Mint([]byte(cfg.Gateway.SigningKey), p, o.ttl)
	if err != nil {
		return fmt.Errorf("admin gateway-token: %w", err)
	}
	if !o.asJSON {
		_, err := fmt.Fprintln(out, token)
		return err
	}
	return printResult(out, true, map[string]any{
		"token": token, "organization": org.Key, "project": projectKey, "session": o.session,
		"acting_for": o.actingFor, "expires_at": expires,
	})
}
