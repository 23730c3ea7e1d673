package main

import (
	"context"

	"github.com/spf13/cobra"
)

// serverLong is the help every long-running command shares.
const serverLong = `

Settings come from the TOML file (--config FILE, else $BALLET_CONFIG), each
key overridden by its environment variable: the key section.name is
BALLET_SECTION_NAME, e.g. server.addr is BALLET_SERVER_ADDR, database.url
BALLET_DATABASE_URL, worker.concurrency BALLET_WORKER_CONCURRENCY. An
unknown key or BALLET_* variable is an error. Run 'ballet config print' (with
the same file and environment) to see every key and its effective value.

Metrics and /readyz are served on metrics.addr (default 127.0.0.1:8083).
Stops gracefully on SIGTERM or SIGINT within server.shutdown_timeout.`

// newServerCmd is serve, api, worker or gateway: a process that runs until
// SIGTERM.
func newServerCmd(name, short, long string, run func(ctx context.Context, configFile string) error) *cobra.Command {
	var path string
	c := &cobra.Command{
		Use:     name,
		Short:   short,
		Long:    long + serverLong,
		Example: "  ballet " + name + " --config ballet.toml\n  BALLET_DATABASE_URL=postgres://… BALLET_REDIS_URL=redis://… ballet " + name,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), path)
		},
	}
	addConfigFlag(c, &path)
	return c
}

func newServeCmd() *cobra.Command {
	return newServerCmd("serve", "run the api, the worker and the gateway in one process",
		"Runs the api (server.addr, default :8080), the worker pool and the LLM gateway\n"+
			"(gateway.addr, default :8082) in one process, which mints and checks its own\n"+
			"gateway tokens when gateway.signing_key is empty. Needs Postgres (database.url)\n"+
			"and Redis (redis.url); migrates first when database.migrate is set.", runServe)
}

func newAPICmd() *cobra.Command {
	return newServerCmd("api", "run the api only",
		"Runs the REST api and the /rpc websocket on server.addr (default :8080). Needs\n"+
			"Postgres (database.url) and Redis (redis.url).", runAPI)
}

func newWorkerCmd() *cobra.Command {
	return newServerCmd("worker", "run the worker only",
		"Runs the worker pool (worker.concurrency planner turns at once) with its health\n"+
			"listener on worker.addr (default :8081). Needs Postgres, Redis and\n"+
			"gateway.signing_key, the key the separate gateway verifies tokens with.", runWorker)
}

func newGatewayCmd() *cobra.Command {
	return newServerCmd("gateway", "run the LLM gateway only",
		"Runs the LLM gateway on gateway.addr (default :8082): it checks gateway tokens\n"+
			"signed with gateway.signing_key (required), relays calls to the configured\n"+
			"model upstreams and meters them in Postgres.", runGateway)
}
